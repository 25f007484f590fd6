"""The machine's probes (cores, a GPU build of torch) and the constants that size the auto settings from them
(APP_*=0: app/core/settings/processes.py)."""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
import sys
from pathlib import Path

# APP_EXPENSIVE_WORKERS=0 (auto) keeps the cheap lane this long after the last cheap call; then decoding may
# use every worker (a translation-only load keeps its throughput)
CHEAP_LANE_HOLD_S = 2.0


CUDA_WORKERS = 2  # inference workers per model process on CUDA (auto)
# model processes per GPU from MANY_CORES cores (auto): one process's Python per item, on one GIL, bounds a GPU
# at one text a request; two on an H200 with 16 cores served 1.41x (/sentiment) and 1.38x (/translate) one,
# interleaved (BENCHMARKS.md, "The GPU box")
CUDA_PROCESSES_PER_GPU = 2
MANY_CORES = 8  # from this many usable cores, APP_HTTP_WORKERS=0 serves from several processes
MAX_AUTO_HTTP_WORKERS = 8
MAX_AUTO_INFERENCE_WORKERS = 8
# from MANY_CORES on a CPU, APP_MODEL_PROCESSES=0 runs one model process per this many cores left after the
# HTTP processes: the issue-36 run on 16 cores, 8 replicas pinned to 2 cores each did 2.6x (/sentiment) and
# 1.5x (/translate) one 16-core server. To be confirmed on a many-core box: docs/scaling.md
CORES_PER_MODEL_PROCESS = 2
MAX_AUTO_MODEL_PROCESSES = 16
# a batch on CUDA when APP_MAX_BATCH_SIZE / APP_MAX_BATCH_WORK are not set: (items, work units); work units
# bound it (512 short sentences, or a few dozen long texts). To be measured on a GPU: docs/scaling.md
CUDA_BATCH = (512, 65_536)


def torch_gpu_build() -> bool:
    """Whether the installed torch may be built for a GPU (CUDA or ROCm): torch.version's `cuda` and `hip`,
    read from its torch/version.py when torch is not imported yet (every build writes it; importing takes
    about a second that a process which needs no tensors can skip). True when that file says nothing clear:
    the caller then imports torch to find out."""
    if (torch := sys.modules.get("torch")) is not None:
        return bool(torch.version.cuda or torch.version.hip)
    found = _torch_version_fields()
    if found is None:
        return False  # no torch at all: no GPU build either (the model processes say what is missing)
    return found.keys() != {"cuda", "hip"} or any(v != "None" for v in found.values())


def _torch_version_fields() -> dict[str, str] | None:
    """torch/version.py's `cuda` and `hip` as written ("13.0", "'13.0'", "None"), without importing torch;
    None without torch, {} when the file cannot be read."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return {}
    return dict(re.findall(r"^(cuda|hip)\s*(?::[^=\n]*)?=\s*(.*?)\s*$", text, re.MULTILINE))


def _torch_version_field(name: str) -> str | None:
    """torch.version.`name` ("13.0"), unquoted; None when unset or unknown."""
    if (torch := sys.modules.get("torch")) is not None:
        return getattr(torch.version, name, None)
    value = (_torch_version_fields() or {}).get(name, "None").strip("'\"")
    return None if value == "None" else value


CUDA_ERROR_NO_DEVICE = 100  # cuInit's answer with no GPU visible (CUDA_VISIBLE_DEVICES="", say)


@functools.cache  # asked for the device, each count and each model process's GPU: the answer stays
def cuda_driver_devices() -> int | None:
    """The GPUs the NVIDIA driver shows this process (CUDA_VISIBLE_DEVICES applied), without importing torch:
    cuInit and cuDeviceGetCount from libcuda, as torch.cuda.device_count() asks them through its runtime.
    The supervisor lays out its processes from it: importing torch there kept every process from starting
    for seconds on the GPU box (BENCHMARKS.md, "The GPU box"). None where the answer is torch's to give: no
    driver library (no NVIDIA GPU; ROCm), a failing driver, or one older than torch's CUDA (its runtime would
    refuse it), or a torch not built for CUDA (ROCm's counts AMD GPUs)."""
    # the major version of the CUDA that torch's runtime needs ("13" of "13.0")
    built = (_torch_version_field("cuda") or "").split(".")[0]
    if not built.isdigit():
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    rc = cuda.cuInit(0)
    if rc == CUDA_ERROR_NO_DEVICE:
        return 0
    driver, count = ctypes.c_int(0), ctypes.c_int(0)
    if rc != 0 or cuda.cuDriverGetVersion(ctypes.byref(driver)) != 0:
        return None
    if driver.value // 1000 < int(built):
        return None
    return count.value if cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 else None


def usable_cores() -> int:
    """The cores this process may run on (taskset, cgroup cpusets), at most its cgroup's CPU quota (a
    container's CPU limit, e.g. Kubernetes resources.limits.cpu), else os.cpu_count()."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:  # cgroup v2: "max 100000" (no limit) or "<quota> <period>" in microseconds
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, -(-int(quota) // int(period))))


def cpu_workers(cores: int) -> int:
    """Auto inference workers on `cores` CPU cores: 1 on one core, 2 below MANY_CORES, then a quarter of the
    cores, at most MAX_AUTO_INFERENCE_WORKERS (Settings.inference_workers_count; each model process's slice:
    app/parallel/shares.py)."""
    if cores < 2:
        return 1
    return 2 if cores < MANY_CORES else min(MAX_AUTO_INFERENCE_WORKERS, cores // 4)
