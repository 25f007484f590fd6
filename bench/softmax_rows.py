"""Attention's softmax on short rows: torch's against model.layers.softmax_rows (rows padded to SHORT_ROW).

  python -m bench.softmax_rows [--threads 1] [--repeats 500]

torch's CPU softmax over rows shorter than one vector register (16 floats under AVX-512, 8 under AVX2) takes a
scalar path. Attention meets such rows wherever keys are few: a short text's encoder, a decoder step over a
short source or an early prefix. Per score shape as served (B rows of H heads, T queries, S keys) and key
count S: µs per call of the softmax alone and of the explicit attention path (scores, softmax, @ v), torch's
and padded. ATEN_CPU_CAPABILITY=avx2 (or default) runs another CPU's kernels.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from bench.machine import describe
from model.layers import softmax_rows

SHAPES = {  # name -> (B, H, T, Dh): the score shapes of the shipped models' attention
    "classifier batch of 32": (32, 4, None, 32),  # T = S: self-attention over the text
    "decoder step, beam 4 x 32": (128, 8, 1, 64),  # one query per hypothesis
}
KEYS = (5, 9, 12, 15, 16, 24, 40)


def per_call_us(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(max(5, repeats // 20)):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e6


def shape_row(b: int, h: int, t: int, s: int, dh: int, repeats: int) -> tuple[float, float, float, float]:
    """(softmax torch / padded µs, attention torch / padded µs) on random scores of that shape."""
    q, k, v = torch.randn(b, h, t, dh), torch.randn(b, h, s, dh), torch.randn(b, h, s, dh)
    scores = (q @ k.transpose(-2, -1)) * dh**-0.5
    assert torch.allclose(softmax_rows(scores), scores.softmax(-1), atol=1e-6)
    return (
        per_call_us(lambda: scores.softmax(-1), repeats),
        per_call_us(lambda: softmax_rows(scores), repeats),
        per_call_us(lambda: ((q @ k.transpose(-2, -1)) * dh**-0.5).softmax(-1) @ v, repeats),
        per_call_us(lambda: softmax_rows((q @ k.transpose(-2, -1)) * dh**-0.5) @ v, repeats),
    )


def rows(repeats: int) -> list[tuple[str, int, tuple[float, float, float, float]]]:
    """Per shape and key count S: (shape, S, shape_row's four µs)."""
    return [
        (name, s, shape_row(b, h, t or s, s, dh, repeats))
        for name, (b, h, t, dh) in SHAPES.items()
        for s in KEYS
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--repeats", type=int, default=500)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(  # noqa: T201
        f"# {describe()}; {args.threads} thread(s)\n"
        "| scores | S | softmax torch µs | padded µs | attention torch µs | padded µs | attention speed-up |\n"
        "|---|---:|---:|---:|---:|---:|---:|"
    )
    for name, s, (soft, padded, attn, attn_padded) in rows(args.repeats):
        print(  # noqa: T201
            f"| {name} | {s} | {soft:.1f} | {padded:.1f} | {attn:.1f} | {attn_padded:.1f} "
            f"| {attn / attn_padded:.2f}× |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
