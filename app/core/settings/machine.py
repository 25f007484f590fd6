"""The machine's probes (cores, a GPU build of torch) and the constants that size the auto settings from them
(APP_*=0: app/core/settings/processes.py)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

# APP_EXPENSIVE_WORKERS=0 (auto) keeps the cheap lane this long after the last cheap call; then decoding may
# use every worker (a translation-only load keeps its throughput)
CHEAP_LANE_HOLD_S = 2.0


CUDA_WORKERS = 2  # inference workers per model process on CUDA (auto)
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
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False  # no torch at all: no GPU build either (the model processes say what is missing)
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return True
    found = dict(re.findall(r"^(cuda|hip)\s*(?::[^=\n]*)?=\s*(.*?)\s*$", text, re.MULTILINE))
    return found.keys() != {"cuda", "hip"} or any(v != "None" for v in found.values())


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
