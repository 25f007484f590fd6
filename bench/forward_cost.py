"""A classifier forward's fixed cost in padded tokens: what model.inference.FORWARD_COST_TOKENS (a CPU) and
GPU_FORWARD_COST_TOKENS (`--device cuda`) stand for.

Times the shipped classifiers' encoders (compiled as served, float32) on one length bucket of B texts of L
tokens, fits seconds = per_call + per_token * B * L by least squares, and prints per_call / per_token: how
many padded tokens one more forward pass costs. On a GPU the buckets are as large as its batches (a few
texts cost no more than one there). Run from the repo root:
`python -m bench.forward_cost [--threads N] [--repeats N] [--device cuda]`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from model import SentimentClassifier, load_checkpoint
from model.inference import classify_ids
from model.jit import compile_classifier

SHAPES = [(b, n) for b in (1, 2, 8) for n in (4, 16, 48)]  # (texts, tokens each): short, as served
GPU_SHAPES = [(b, n) for b in (32, 128, 512) for n in (8, 24, 64)]  # a GPU's batches (CUDA_BATCH)


def seconds(model: SentimentClassifier, graph: object, b: int, n: int, repeats: int) -> float:
    ids = [[5 + (i + j) % 100 for j in range(n)] for i in range(b)]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        classify_ids(model, ids, b, graph)  # type: ignore[arg-type]
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoints", type=Path, default=Path("checkpoints"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=20, help="timed runs per shape; the fastest is kept")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shapes = SHAPES if device.type == "cpu" else GPU_SHAPES
    print(f"torch {torch.__version__}, {device}, {args.threads} thread(s), best of {args.repeats}\n")
    print("| model | d_model | per call ms | per token us | per call / per token |")
    print("|---|---:|---:|---:|---:|")
    for path in sorted(args.checkpoints.glob("sentiment-*")):
        loaded = load_checkpoint(path)
        assert isinstance(loaded.model, SentimentClassifier)
        model = loaded.model.encoder_only().to(device)  # the head's hashing is input work, not a forward pass
        graph = compile_classifier(model)
        x = torch.tensor([[1.0, b * n] for b, n in shapes], dtype=torch.float64)
        y = torch.tensor(
            [[seconds(model, graph, b, n, args.repeats)] for b, n in shapes], dtype=torch.float64
        )
        per_call, per_token = torch.linalg.lstsq(x, y).solution[:, 0].tolist()
        print(
            f"| {path.name} | {model.cfg.d_model} | {per_call * 1e3:.2f} | {per_token * 1e6:.1f}"
            f" | {per_call / per_token:.0f} |"
        )


if __name__ == "__main__":
    main()
