"""What each of several model processes (APP_MODEL_PROCESSES > 1) gets of the server: its slice of the cores
(a CPU) or its GPU (CUDA), and its share of the admission limits, split exactly: the shares of a limit add
up to the setting, so the server never admits more than one process would (docs/scaling.md)."""

from __future__ import annotations

import os

from app.core.settings import Settings, cpu_workers


def share(total: int, parts: int, index: int) -> int:
    """Part `index` of `total` split into `parts` floor/ceil shares (the first ones take the remainder):
    sum(share(t, n, i) for i in range(n)) == t."""
    return total // parts + (1 if index < total % parts else 0)


def core_slices(cores: list[int], processes: int, http_workers: int) -> list[list[int]]:
    """Each model process's cores: disjoint contiguous slices of `cores` (floor/ceil sizes), leaving the
    last `http_workers` cores to the HTTP processes when there are several of them and enough cores (as
    Settings.inference_threads leaves them one each); with fewer cores than processes, one core each,
    shared round-robin."""
    reserve = http_workers if http_workers > 1 and len(cores) - http_workers >= processes else 0
    pool = cores[: len(cores) - reserve]
    if len(pool) < processes:
        return [[pool[i % len(pool)]] for i in range(processes)]
    out, start = [], 0
    for i in range(processes):
        n = share(len(pool), processes, i)
        out.append(pool[start : start + n])
        start += n
    return out


def model_settings(settings: Settings, index: int, processes: int, cores: int | None) -> Settings:
    """Model process `index`'s settings: the number of model processes (a process on a slice of the cores
    would count itself alone), its share of APP_MAX_QUEUE, APP_MAX_QUEUE_WORK and APP_MAX_DECODE_QUEUES (the
    PNG limit: app/parallel/engine.py), and on `cores` cores of its own (a CPU slice; None: not pinned) the
    inference workers and threads that auto gives a server of that many cores (unless set)."""
    if processes <= 1:
        return settings
    s = settings
    update: dict[str, int] = {
        "model_processes": processes,
        "max_queue": share(s.max_queue, processes, index),
        "max_queue_work": share(s.max_queue_work, processes, index),
        "max_decode_queues": share(s.max_decode_queues, processes, index),
    }
    if cores is not None:
        workers = s.inference_workers or cpu_workers(cores)
        update["inference_workers"] = workers
        update["torch_threads"] = s.torch_threads or max(1, (cores - 1) // workers)
    return s.model_copy(update=update)


def pinned(settings: Settings, processes: int) -> bool:
    """Whether the model processes run on slices of the cores: on a CPU, when there are several."""
    return processes > 1 and settings.device_type() == "cpu"


def gpu_env(settings: Settings, index: int) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for model process `index`: one visible GPU each (round-robin when there are
    more processes than GPUs); nothing on a CPU or for an explicit APP_DEVICE=cuda:N."""
    if settings.device_type() != "cuda" or settings.cuda_index() is not None:
        return {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = settings.gpu_count()  # CUDA stops at the list's first GPU that does not exist: only those before
    gpus = [g.strip() for g in visible.split(",")][:count] if visible else []
    gpus = gpus or [str(i) for i in range(count)]
    return {"CUDA_VISIBLE_DEVICES": gpus[index % len(gpus)]} if gpus else {}
