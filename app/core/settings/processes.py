"""Devices and processes: where the models run (device, dtype), and how many HTTP processes, model processes,
inference workers and threads serve them (0 = auto, sized from the machine: app/core/settings/machine.py)."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from app.core.settings import machine  # its probes looked up there, where a test patches them
from app.core.settings.base import ENV_PREFIX, SettingsError
from app.core.settings.machine import (
    CHEAP_LANE_HOLD_S,
    CORES_PER_MODEL_PROCESS,
    CUDA_BATCH,
    CUDA_PROCESSES_PER_GPU,
    CUDA_WORKERS,
    MANY_CORES,
    MAX_AUTO_HTTP_WORKERS,
    MAX_AUTO_MODEL_PROCESSES,
    cpu_workers,
)

# torch is imported where a method needs it: an HTTP process never does (app/parallel/http.py)
if TYPE_CHECKING:
    import torch


class ProcessSettings(BaseSettings):
    """A group of Settings (app/core/settings/__init__.py), which reads it from the environment."""

    if TYPE_CHECKING:  # LimitSettings', beside this group in Settings: for mypy only, no fields at run time
        max_batch_size: int
        max_batch_work: int

        def split_limits_error(self, processes: int) -> str | None: ...

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # forward passes that run at once, each in its own thread; 0 = auto: 2 on a CPU with 2+ cores (two
    # single-threaded batches side by side beat one batch on two threads), CUDA_WORKERS on CUDA
    inference_workers: int = Field(default=0, ge=0, le=64)
    # HTTP processes (app/parallel/): each runs the app on one shared socket, one model process runs the models;
    # 1 = one process for everything; 0 = auto (http_workers_count)
    http_workers: int = Field(default=0, ge=0, le=64)
    # model processes (app/parallel/), each with its own models, batches and share of the admission limits;
    # on a CPU each pinned to its own slice of the cores, with CUDA 1 or 2 per visible GPU; 0 = auto
    # (model_processes_count)
    model_processes: int = Field(default=0, ge=0, le=64)
    # of those, how many may run expensive batches (decoding, attention maps) at once; 0 = auto: all but one
    # when there are 2+ workers and a classifier is served (a lane for its cheap batches), held for
    # CHEAP_LANE_HOLD_S after the last cheap batch (then all); else all
    expensive_workers: int = Field(default=0, ge=0, le=64)
    # intra-op threads per worker; 0 = auto: on CPU the cores left after one for the event loop, shared by
    # the workers (at least 1 each); on CUDA 1 (the GPU runs the math; idle intra-op threads spin)
    torch_threads: int = Field(default=0, ge=0)
    # sys.setswitchinterval: how long a thread waiting for the GIL waits before it asks for it. Python's
    # 5 ms default makes an inference worker wait up to 5 ms for the event loop after every batch
    gil_switch_interval_ms: float = Field(default=0.2, gt=0, le=100)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        v = v.strip().lower()
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError(f"must be auto, cpu, cuda or cuda:N, got {v!r}")
        return v

    def inference_workers_count(self) -> int:
        """APP_INFERENCE_WORKERS, or for 0: on a CPU with 2+ cores 2, and from MANY_CORES on a quarter of
        the cores (at most MAX_AUTO_INFERENCE_WORKERS: small models gain little from intra-op threads, so
        many cores are better used as more batches side by side); on CUDA CUDA_WORKERS (one batch's CPU
        side, padding and copies, overlaps another's kernels: BENCHMARKS.md, "The GPU box")."""
        import torch

        if self.inference_workers:
            return self.inference_workers
        cores = torch.get_num_threads()
        if self.torch_device().type == "cuda":
            return CUDA_WORKERS
        return cpu_workers(cores)

    def http_workers_count(self) -> int:
        """APP_HTTP_WORKERS, or for 0: one process below MANY_CORES cores (measured best on 2 cores:
        BENCHMARKS.md), else a quarter of the cores on a CPU (the rest run the models) and half of them on
        CUDA (the GPU runs the models), at most MAX_AUTO_HTTP_WORKERS."""
        if self.http_workers:
            return self.http_workers
        cores = machine.usable_cores()
        if cores < MANY_CORES:
            return 1
        share = cores // 2 if self.device_type() == "cuda" else cores // 4
        return max(2, min(MAX_AUTO_HTTP_WORKERS, share))

    def model_processes_count(self) -> int:
        """APP_MODEL_PROCESSES, or for 0: with CUDA one per visible GPU (the GPU of APP_DEVICE=cuda:N), and
        from MANY_CORES cores CUDA_PROCESSES_PER_GPU per GPU where the admission limits can be shared out
        between that many (split_limits_error); on a CPU one below MANY_CORES cores, else one per
        CORES_PER_MODEL_PROCESS cores left after the HTTP processes, at most MAX_AUTO_MODEL_PROCESSES and at
        most as many as the admission limits can be shared out between."""
        if self.model_processes:
            return self.model_processes
        cores = machine.usable_cores()
        if self.device_type() == "cuda":
            # below MANY_CORES one process serves HTTP too (http_workers_count): a split would add a hop
            gpus = 1 if self.cuda_index() is not None else max(1, self.gpu_count())
            several = gpus * CUDA_PROCESSES_PER_GPU
            return several if cores >= MANY_CORES and not self.split_limits_error(several) else gpus
        if cores < MANY_CORES:
            return 1
        http = self.http_workers_count()
        n = min(MAX_AUTO_MODEL_PROCESSES, (cores - http) // CORES_PER_MODEL_PROCESS)
        while n > 1 and self.split_limits_error(n):
            n -= 1
        return max(1, n)

    def expensive_workers_count(self, cheap_models: bool) -> int:
        """APP_EXPENSIVE_WORKERS (at most the workers), or for 0: workers - 1 with 2+ workers and cheap
        (classifier) models to serve, else every worker."""
        workers = self.inference_workers_count()
        if self.expensive_workers:
            return min(self.expensive_workers, workers)
        return workers - 1 if workers >= 2 and cheap_models else workers

    def cheap_lane_hold_s(self) -> float | None:
        """How long the auto lane is held after a cheap call (None: APP_EXPENSIVE_WORKERS is a hard cap)."""
        return None if self.expensive_workers else CHEAP_LANE_HOLD_S

    def inference_threads(self) -> int:
        """APP_TORCH_THREADS, or for 0: on CPU the cores left after the event loop and the HTTP processes
        (APP_HTTP_WORKERS > 1), shared by the workers, at least 1 each; on CUDA 1: the GPU runs the math,
        and idle intra-op threads spin on cores the HTTP processes need (4x the CPU per request)."""
        import torch

        if self.torch_threads:
            return self.torch_threads
        cores = torch.get_num_threads()
        if self.torch_device().type == "cuda":
            return 1
        http = self.http_workers_count()
        return max(1, (cores - 1 - (http if http > 1 else 0)) // self.inference_workers_count())

    def cheap_workers_count(self) -> int:
        """How many cheap (classifier) batches may run at once, unless a whole batch more waits behind them
        (app/batching/workers.py): in one process on a CPU, where the event loop answers HTTP too, as many
        as the cores left after the loop hold at inference_threads() each, at least 1 (on 2 cores 1: a
        second batch would take the loop's core, while the items that wait for the running batch make the
        next one fuller: BENCHMARKS.md, "The cores of a small machine"); else, and without batching
        (APP_MAX_BATCH_SIZE=1: nothing to gather), every worker."""
        import torch

        workers = self.inference_workers_count()
        if self.http_workers_count() > 1 or self.model_processes_count() > 1 or self.max_batch_size == 1:
            return workers
        if self.torch_device().type == "cuda":
            return workers
        return max(1, min(workers, (torch.get_num_threads() - 1) // self.inference_threads()))

    def device_type(self) -> str:
        """torch_device()'s type ("cpu" or "cuda"), without importing torch where the answer is certain:
        APP_DEVICE=cpu, auto with a torch built for CPUs only, or where the NVIDIA driver answers. The
        supervisor (app/parallel/) then starts its processes without it; SettingsError as torch_device's."""
        if self.device == "cpu" or (self.device == "auto" and not machine.torch_gpu_build()):
            return "cpu"
        if (gpus := self._driver_gpus()) is None:
            return self.torch_device().type
        if self.device == "auto":
            return "cuda" if gpus else "cpu"
        self._check_cuda(gpus)
        return "cuda"

    def cuda_index(self) -> int | None:
        """N of APP_DEVICE=cuda:N (one GPU named), else None."""
        return int(self.device.split(":")[1]) if self.device.startswith("cuda:") else None

    def gpu_count(self) -> int:
        """The GPUs visible to this process: the driver's count, or torch's where torch is imported already."""
        if (gpus := self._driver_gpus()) is not None:
            return gpus
        import torch

        return torch.cuda.device_count()

    def _driver_gpus(self) -> int | None:
        """The NVIDIA driver's count (machine.cuda_driver_devices) while torch is not imported (the supervisor:
        it starts its processes seconds sooner), else None: torch, once imported, answers for free."""
        return None if "torch" in sys.modules else machine.cuda_driver_devices()

    def _check_cuda(self, gpus: int) -> None:
        """SettingsError unless APP_DEVICE=cuda or cuda:N names a GPU among the `gpus` visible."""
        if not gpus:
            raise SettingsError(f"{ENV_PREFIX}DEVICE={self.device}: CUDA is not available on this machine")
        if (index := self.cuda_index()) is not None and index >= gpus:
            raise SettingsError(f"{ENV_PREFIX}DEVICE={self.device}: only {gpus} CUDA device(s)")

    def torch_device(self) -> torch.device:
        """The device to serve on; `auto` takes CUDA when present. Raises SettingsError if unavailable."""
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        dev = torch.device(self.device)
        if dev.type == "cuda":
            self._check_cuda(torch.cuda.device_count() if torch.cuda.is_available() else 0)
        return dev

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        """float32 for `auto`, on CUDA too: float16 runs a batch of a new shape (every batch, under real
        traffic) many times slower, for a small gain on repeated shapes (docs/scaling.md)."""
        import torch

        if self.dtype == "auto":
            return torch.float32
        return getattr(torch, self.dtype)  # type: ignore[no-any-return]

    def batch_limits(self, expensive: bool) -> tuple[int, int | None]:
        """(items, work units) a batch may hold: APP_MAX_BATCH_SIZE and, for expensive batches (decoding,
        attention), APP_MAX_BATCH_WORK. On CUDA, where these are not set, batches are bounded by work units
        (tokens) rather than by items, every kind of batch: CUDA_BATCH (a GPU's throughput keeps growing
        with the batch far past a CPU's batch size)."""
        cuda = self.torch_device().type == "cuda"
        items = self.max_batch_size
        work = self.max_batch_work if expensive else None
        if cuda:
            if "max_batch_size" not in self.model_fields_set:
                items = CUDA_BATCH[0]
            work = self.max_batch_work if "max_batch_work" in self.model_fields_set else CUDA_BATCH[1]
        return items, work
