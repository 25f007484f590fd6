"""A classifier batch three ways: eager, torch.compile (plain, and with inductor's C++ wrapper) and the
TorchScript graph (model.jit.compile_classifier).

  python -m bench.classifier_paths [--checkpoint checkpoints/sentiment-en] [--data ../shared/data/imdb/test.tsv]

One intra-op thread and the server's GIL switch interval (0.2 ms). Each path runs model.inference.classify_ids
(padding, length buckets, n-gram hashing, probabilities) on two batches: 26 of serve_load's short inputs and
the first 64 reviews of --data. Prints each path's build time (trace + script + check, or torch.compile's
first call on each batch) and its median ms per batch, alone and beside a thread busy running Python (a
stand-in for the server's event loop, which holds the GIL whenever it runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from bench.load import EN_WORDS, WORDS, texts
from model import SentimentClassifier, load_checkpoint
from model.inference import ClassifierGraph, classify_ids
from model.jit import compile_classifier
from model.preprocess import classifier_ids
from training.data import read_imdb, read_nsmc


@contextmanager
def busy_python() -> Iterator[None]:
    """A thread running pure Python until the block ends."""
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, default=Path("checkpoints/sentiment-en"))
    p.add_argument("--data", type=Path, default=Path("../shared/data/imdb/test.tsv"))
    p.add_argument("--format", choices=("imdb", "nsmc"), default="imdb")
    p.add_argument("--runs", type=int, default=30, help="timed calls per path, batch and condition")
    p.add_argument("--paths", default="eager,compile,compile-cpp,script", help="comma-separated subset")
    p.add_argument(
        "--inductor-cache",
        type=Path,
        help="torch.compile's cache, kept (default: an empty one, then removed)",
    )
    args = p.parse_args(argv)
    # by default an empty inductor cache: torch.compile's build time as a fresh container pays it
    cache = str(args.inductor_cache or tempfile.mkdtemp(prefix="inductor-"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    torch.set_num_threads(1)
    sys.setswitchinterval(0.0002)  # the server's APP_GIL_SWITCH_INTERVAL_MS
    loaded = load_checkpoint(args.checkpoint)
    model = loaded.model
    assert isinstance(model, SentimentClassifier), f"{args.checkpoint} is not a classifier"
    lang = (model.cfg.source_langs or (args.checkpoint.name.rsplit("-", 1)[-1],))[0]
    reviews = (read_imdb if args.format == "imdb" else read_nsmc)(args.data)[:64]
    batches = {
        "26 short": texts(WORDS.get(lang, EN_WORDS))[:26],
        f"64 {args.format}": [r.text for r in reviews],
    }
    ids = {k: [classifier_ids(loaded.tokenizer, t, model.cfg) for t in v] for k, v in batches.items()}

    graphs: dict[str, ClassifierGraph] = {}
    for path in args.paths.split(","):
        start = time.perf_counter()
        if path == "eager":
            graphs[path] = ClassifierGraph(model)
        elif path == "script":
            graphs[path] = compile_classifier(model)
        elif path in (
            "compile",
            "compile-cpp",
        ):  # compile-cpp: inductor's C++ wrapper, no Python between kernels
            options = {"cpp_wrapper": path == "compile-cpp"}
            graphs[path] = ClassifierGraph(model, torch.compile(model, dynamic=True, options=options))  # type: ignore[arg-type]
        else:
            raise SystemExit(f"unknown path {path!r}")
        warm = []
        for k in batches:  # first calls: torch.compile compiles here (several buckets, shapes)
            t = time.perf_counter()
            classify_ids(model, ids[k], len(ids[k]), graphs[path], batches[k])
            warm.append(f"{k} {time.perf_counter() - t:.2f} s")
        print(
            f"{path}: ready in {time.perf_counter() - start:.1f} s (first calls: {', '.join(warm)})",
            flush=True,
        )

    want = {k: classify_ids(model, ids[k], len(ids[k]), None, batches[k]) for k in batches}
    for path, graph in graphs.items():
        for k in batches:
            diff = (classify_ids(model, ids[k], len(ids[k]), graph, batches[k]) - want[k]).abs().max().item()
            assert diff < 1e-4, f"{path} differs from eager by {diff:.2g} on {k}"

    load = os.getloadavg()[0]
    print(f"\n{args.checkpoint.name}, ms per batch (median of {args.runs}; runs alternate between paths)")
    print("| path | " + " | ".join(f"{k} alone | {k} beside busy Python" for k in batches) + " |")
    print("|---|" + "---:|" * (2 * len(batches)))
    cells: dict[str, list[str]] = {path: [] for path in graphs}
    for k in batches:
        for busy in (False, True):
            times: dict[str, list[float]] = {path: [] for path in graphs}
            with busy_python() if busy else nullcontext():
                for _ in range(args.runs):
                    for path, graph in graphs.items():
                        start = time.perf_counter()
                        classify_ids(model, ids[k], len(ids[k]), graph, batches[k])
                        times[path].append(time.perf_counter() - start)
            for path in graphs:
                cells[path].append(f"{1000 * statistics.median(times[path]):.1f}")
    for path in graphs:
        print(f"| {path} | " + " | ".join(cells[path]) + " |")
    print(f"(1-minute load average {load:.1f} before the timed runs, {os.getloadavg()[0]:.1f} after)")
    if args.inductor_cache is None:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
