"""What machine a number (or a failure) came from: the CPU's name, family and model, and the kernels torch runs.

The same test can pass on one CPU and fail on another where float rounding differs (AVX-512 vs AVX2 kernels,
Intel vs AMD), so benches print this beside their tables and `make test` beside a failure."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def cpu_name() -> str:
    """e.g. "AMD EPYC", or "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"."""
    return cpuinfo().get("model name") or platform.processor() or "unknown CPU"


def torch_isa() -> str:
    """The kernels torch dispatches to (AVX512, AVX2, DEFAULT...), forced ones named as such; "no torch"."""
    try:
        import torch
    except ImportError:
        return "no torch"
    isa = torch.backends.cpu.get_cpu_capability()
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    return f"{isa} (ATEN_CPU_CAPABILITY={forced})" if forced else isa


def describe() -> str:
    """One line: CPU name, family/model, cores, torch's kernels, e.g. "AMD EPYC (family 25 model 17), 2 cores,
    torch 2.13.0 with AVX512 kernels"."""
    info = cpuinfo()
    where = f" (family {info['cpu family']} model {info['model']})" if "cpu family" in info else ""
    try:
        import torch

        version = f"torch {torch.__version__.split('+')[0]}"
    except ImportError:
        version = "torch"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu_name()}{where}, {cores} cores, {version} with {torch_isa()} kernels"
