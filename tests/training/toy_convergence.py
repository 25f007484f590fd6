"""How many steps the toy translators of test_training_toy.py need, per seed and task, on this CPU's kernels.

    python -m tests.training.toy_convergence [--seeds 0 1 2] [--tasks copy reverse]
    ATEN_CPU_CAPABILITY=avx2 python -m tests.training.toy_convergence    # another CPU's kernels (or =default)

Trains exactly as the test does and prints, per run, the first step from which validation (200 sequences)
and held-out (the test's 100) are both exact, the last step at which either was not, the counts at the end,
and the smallest teacher-forced probability of a right token on validation at the end (the margin: above
0.5, no rounding can flip that argmax). The test's STEPS must leave margin past every run's last miss.
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.machine import describe
from model import Translator, pad_ids
from tests.training.test_training_toy import (
    BOS,
    EOS,
    PAD,
    STEPS,
    TASKS,
    exact,
    held_out,
    train_translator,
    validation,
)


def margin(model: Translator, task: str, seqs: list[list[int]]) -> float:
    """The smallest probability the model gives a right token, teacher-forced, over `seqs`."""
    src = pad_ids(seqs, PAD)
    tgt = pad_ids([[BOS, *TASKS[task](s), EOS] for s in seqs], PAD)
    lp = model(src, tgt[:, :-1]).log_softmax(-1).gather(-1, tgt[:, 1:, None])[..., 0]
    return float(lp.masked_fill(tgt[:, 1:] == PAD, 0.0).min().exp())


def run(task: str, seed: int) -> tuple[list[int], tuple[int, int], float, float]:
    """Train as the test does -> (steps at which validation or held-out was not exact, the exact counts at
    the end, the margin at the end, seconds)."""
    check, test = validation(task), held_out(task)
    misses: list[int] = []
    counts = (0, 0)

    def watch(step: int, model: Translator) -> None:
        nonlocal counts
        counts = (exact(model, task, check), exact(model, task, test))
        if counts != (len(check), len(test)):
            misses.append(step)

    start = time.perf_counter()
    model = train_translator(task, seed=seed, watch=watch)
    took = time.perf_counter() - start
    with torch.inference_mode():
        return misses, counts, margin(model, task, check), took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--tasks", nargs="+", default=list(TASKS))
    args = p.parse_args()
    torch.set_num_threads(1)  # as the tests run
    print(f"# {describe()}; {STEPS} steps")  # noqa: T201
    print("| task | seed | all exact from step | last miss at step | validation | held-out | margin | s |")  # noqa: T201
    print("|---|---:|---:|---:|---:|---:|---:|---:|")  # noqa: T201
    for task in args.tasks:
        for seed in args.seeds:
            misses, (v, h), m, took = run(task, seed)
            last = max(misses, default=0)
            since = last + 25 if last < STEPS else "never"
            print(f"| {task} | {seed} | {since} | {last} | {v}/200 | {h}/100 | {m:.3f} | {took:.1f} |")  # noqa: T201


if __name__ == "__main__":
    main()
