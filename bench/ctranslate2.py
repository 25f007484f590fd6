"""This project's decoder against CTranslate2 on the same weights: token parity, then speed, as one markdown table.

  python -m bench.ctranslate2 [--checkpoint checkpoints/translate-fr-en] [--limit 200] [--parity-limit 0]
                              [--repeats 3]

Converts the checkpoint (engines/ct2_convert.py), checks on the test split that CTranslate2 float32 decodes the
tokens ours decodes (greedy and beam 4, length penalty 0: the only value both engines share; and beam 4 at
0.6 through the server's CTranslate2 engine, which re-ranks with our penalty), then times both
engines in one run on the first --limit test sentences: ours fp32 and int8 (`load_checkpoint(...,
quantize="int8")`), traced as served (`--eager`: without model.jit.trace_translator), CTranslate2 float32
and int8 (compute_type at load), greedy and beam 4, batch 1 (one sentence per call) and 32 (length-sorted batches, as the server and evaluate CLI cut
them), 1 and 2 threads (torch.set_num_threads / intra_threads with inter_threads=1). Each cell alternates
the engines repeat by repeat (both see the same machine load) and reports medians of the repeats.

tokens/s: generated tokens of the best hypothesis, without EOS, over the wall time of the whole set (each
engine counts its own outputs). p50: the median sentence's milliseconds at batch 1. ratio: ours / CTranslate2
tokens/s (> 1: ours is faster).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ctranslate2
import torch

from bench.machine import cpu_name
from engines.ct2_convert import export_ctranslate2
from engines.ct2_decode import CT2Decoder, translate_ids_ctranslate2
from model import Decodable, DecodeOptions, LoadedModel, Translator, load_checkpoint
from model.inference import translate_ids
from model.jit import trace_translator
from model.preprocess import source_ids
from training.data import resolve_data_dir
from training.evaluate import read_pairs
from training.ship import TEST_SETS

BEAM = 4
BATCHES = (1, 32)
THREADS = (1, 2)
PRECISIONS = ("fp32", "int8")
WARMUP = 8  # sentences run by each engine before a cell is timed

Decode = Callable[[list[list[int]], DecodeOptions, int], list[list[int]]]  # (ids, options, batch) -> tokens


@dataclass
class Timing:
    tokens_per_s: float
    p50_ms: float | None  # batch 1 only


def ours(loaded: LoadedModel, model: Decodable[Any]) -> Decode:
    lang = loaded.config.target_langs[0]

    def decode(seqs: list[list[int]], opts: DecodeOptions, batch: int) -> list[list[int]]:
        return [hyps[0].tokens for hyps in translate_ids(model, seqs, opts, lang, batch)]

    return decode


def theirs(translator: ctranslate2.Translator, loaded: LoadedModel) -> Decode:
    lang = loaded.config.target_langs[0]

    def decode(seqs: list[list[int]], opts: DecodeOptions, batch: int) -> list[list[int]]:
        return translate_ids_ctranslate2(translator, loaded.tokenizer, loaded.config, seqs, opts, lang, batch)

    return decode


def run_once(
    decode: Decode, seqs: list[list[int]], opts: DecodeOptions, batch: int
) -> tuple[float, int, list[float]]:
    """Seconds for the whole set, output tokens, per-sentence seconds (batch 1: one call per sentence)."""
    if batch > 1:
        start = time.perf_counter()
        out = decode(seqs, opts, batch)
        return time.perf_counter() - start, sum(map(len, out)), []
    times, tokens = [], 0
    for seq in seqs:
        start = time.perf_counter()
        out = decode([seq], opts, 1)
        times.append(time.perf_counter() - start)
        tokens += len(out[0])
    return sum(times), tokens, times


def time_engines(
    engines: list[Decode], threads: int, seqs: list[list[int]], opts: DecodeOptions, batch: int, repeats: int
) -> list[Timing]:
    """Time the engines on the same sentences, alternating them repeat by repeat; medians of the repeats."""
    torch.set_num_threads(threads)  # ours; CTranslate2's threads are its translator's
    for decode in engines:
        decode(seqs[:WARMUP], opts, min(batch, WARMUP))
    runs: list[list[tuple[float, int, list[float]]]] = [[] for _ in engines]
    for _ in range(repeats):
        for decode, results in zip(engines, runs, strict=True):
            results.append(run_once(decode, seqs, opts, batch))
    timings = []
    for results in runs:
        rate = statistics.median(tokens / seconds for seconds, tokens, _ in results)
        p50 = statistics.median(statistics.median(t) * 1000 for _, _, t in results) if batch == 1 else None
        timings.append(Timing(rate, p50))
    return timings


def parity(engines: tuple[Decode, Decode], served: Decode, seqs: list[list[int]]) -> None:
    """Print the share of sentences both engines translate to the same tokens (fp32, batch 32): the plain
    mapping at length penalty 0, then the server's CTranslate2 engine (`served`, CT2Decoder: re-ranked with
    our GNMT penalty) at the API's default 0.6."""
    torch.set_num_threads(max(THREADS))
    cases = [(1, 0.0, engines[1], ""), (BEAM, 0.0, engines[1], ""), (BEAM, 0.6, served, ", served engine")]
    for beam, lp, theirs_decode, label in cases:
        opts = DecodeOptions(beam_size=beam, length_penalty=lp)
        a, b = (decode(seqs, opts, 32) for decode in (engines[0], theirs_decode))
        same = sum(x == y for x, y in zip(a, b, strict=True))
        mode = "greedy" if beam == 1 else f"beam {beam}"
        print(
            f"parity fp32 {mode}, length penalty {lp}{label}: {same}/{len(seqs)} sentences identical"
            f" ({100 * same / len(seqs):.2f}%)",
            flush=True,
        )


def served(decoder: CT2Decoder, loaded: LoadedModel) -> Decode:
    """APP_TRANSLATION_ENGINE=ctranslate2's decoding (engines/ct2_decode.py CT2Decoder)."""
    lang = loaded.config.target_langs[0]

    def decode(seqs: list[list[int]], opts: DecodeOptions, batch: int) -> list[list[int]]:
        return [hyps[0].tokens for hyps in decoder.translate_ids(seqs, opts, lang, batch)]

    return decode


def load_ours(path: Path, quantize: str | None, eager: bool) -> tuple[LoadedModel, Decodable[Any]]:
    """The checkpoint and its decoder as the server and the evaluate CLI run it: traced unless `eager`."""
    loaded = load_checkpoint(path, quantize=quantize)
    assert isinstance(loaded.model, Translator)
    return loaded, loaded.model if eager else trace_translator(loaded.model)


def p50(timing: Timing) -> str:
    return "-" if timing.p50_ms is None else f"{timing.p50_ms:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, default=Path("checkpoints/translate-fr-en"))
    p.add_argument("--data-dir", default=None, help="datasets root (default: ../shared/data)")
    p.add_argument("--limit", type=int, default=200, help="test sentences timed (first N)")
    p.add_argument("--parity-limit", type=int, default=0, help="test sentences checked for parity (0 = all)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per engine and cell (median)")
    p.add_argument(
        "--eager", action="store_true", help="ours without traced graphs (model.jit.trace_translator)"
    )
    args = p.parse_args()

    fp32, fp32_decoder = load_ours(args.checkpoint, None, args.eager)
    dataset = fp32.meta.get("training", {}).get("config", {}).get("dataset", "")
    if dataset not in TEST_SETS:
        raise SystemExit(f"{args.checkpoint}: no known test split for its dataset {dataset!r}")
    rel, data_format, _ = TEST_SETS[dataset]
    src_lang, tgt_lang = fp32.config.source_langs[0], fp32.config.target_langs[0]
    texts, _ = read_pairs(fp32, resolve_data_dir(args.data_dir) / rel, data_format, src_lang, tgt_lang)
    seqs = [source_ids(fp32.tokenizer, t, fp32.config) for t in texts]
    int8, int8_decoder = load_ours(args.checkpoint, "int8", args.eager)

    with tempfile.TemporaryDirectory() as tmp:
        out = str(export_ctranslate2(args.checkpoint, Path(tmp) / "model"))
        translators = {
            (precision, t): ctranslate2.Translator(
                out,
                compute_type="float32" if precision == "fp32" else "int8",
                intra_threads=t,
                inter_threads=1,
            )
            for precision in PRECISIONS
            for t in THREADS
        }
    print(
        f"{cpu_name()}, {len(seqs)} test sentences ({dataset}); torch {torch.__version__}, ctranslate2"
        f" {ctranslate2.__version__}; timing: first {args.limit} sentences, median of {args.repeats} repeats\n"
    )
    parity_seqs = seqs[: args.parity_limit] if args.parity_limit else seqs
    fp32_ct2 = translators["fp32", max(THREADS)]
    engine = CT2Decoder(fp32_ct2, fp32.tokenizer, fp32.config, fp32_decoder)
    parity((ours(fp32, fp32_decoder), theirs(fp32_ct2, fp32)), served(engine, fp32), parity_seqs)

    timed = seqs[: args.limit]
    print("\n| engine | precision | decoding | batch | threads | tokens/s | p50 ms/sentence | ours/CT2 |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for precision in PRECISIONS:
        loaded, decoder = (fp32, fp32_decoder) if precision == "fp32" else (int8, int8_decoder)
        for beam in (1, BEAM):
            opts = DecodeOptions(beam_size=beam, length_penalty=0.0)
            mode = "greedy" if beam == 1 else f"beam {beam}"
            for batch in BATCHES:
                for t in THREADS:
                    ct2 = theirs(translators[precision, t], fp32)
                    mine, other = time_engines(
                        [ours(loaded, decoder), ct2], t, timed, opts, batch, args.repeats
                    )
                    cell = f"{precision} | {mode} | {batch} | {t}"
                    ratio = f"{mine.tokens_per_s / other.tokens_per_s:.2f}"
                    print(f"| ours | {cell} | {mine.tokens_per_s:,.0f} | {p50(mine)} | {ratio} |")
                    print(f"| CT2 | {cell} | {other.tokens_per_s:,.0f} | {p50(other)} | |", flush=True)


if __name__ == "__main__":
    main()
