"""Evaluation CLI: score a checkpoint on a data file with the server's inference code.

  python -m training evaluate --checkpoint checkpoints/translate-fr-en \
      --data ../shared/data/tatoeba/fra-eng/test.tsv --format tatoeba [--beam-size 4] [--limit 500] \
      [--engine ctranslate2]

  python -m training evaluate --checkpoint checkpoints/sentiment-en --data training/probes/en.jsonl --format probe

The last line printed is one JSON object (accuracy / macro_f1 / n / ece, or bleu / chrf / signatures / n /
decoding). A classifier's ece is its served scores' expected calibration error (15 bins); with a temperature,
ece_at_t1 is the same at T = 1, before calibration.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from engines.ct2_decode import CT2Decoder, load_ct2_decoder
from model import Decodable, DecodeOptions, LoadedModel, Translator, load_checkpoint
from model.classifier import calibrated
from model.inference import classifier_logits, translate_texts
from model.jit import trace_translator
from model.preprocess import classifier_ids, source_ids
from model.quantize import MODES
from model.unknowns import encode_source, restore_text
from training.data import read_imdb, read_nsmc, read_parallel, read_probe, read_tsv_pairs
from training.metrics import accuracy_f1, bleu_chrf, expected_calibration_error

log = logging.getLogger(__name__)
FORMATS = ("nsmc", "imdb", "probe", "tatoeba", "multi30k")
SENTIMENT_FORMATS = ("nsmc", "imdb", "probe")


def sentiment_logits(loaded: LoadedModel, texts: list[str]) -> torch.Tensor:
    """The classifier's logits (N, C) before its temperature, on the served code path (classify_ids)."""
    ids = [classifier_ids(loaded.tokenizer, t, loaded.config) for t in texts]  # type: ignore[arg-type]
    return classifier_logits(loaded.model, ids, texts=texts)  # type: ignore[arg-type]


def calibration(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> dict[str, Any]:
    """ECE of the served probabilities, and at T = 1 (before calibration) when the model has a temperature."""
    res: dict[str, Any] = {"ece": expected_calibration_error(calibrated(logits, temperature), labels)}
    if temperature != 1.0:
        res |= {
            "temperature": temperature,
            "ece_at_t1": expected_calibration_error(logits.softmax(-1), labels),
        }
    return res


def evaluate_sentiment(loaded: LoadedModel, data: Path, fmt: str, limit: int = 0) -> dict[str, Any]:
    """Accuracy, macro-F1 and the expected calibration error (ECE_BINS bins) of the served scores."""
    rows = read_nsmc(data) if fmt == "nsmc" else read_imdb(data)
    rows = rows[:limit] if limit else rows
    logits, labels = sentiment_logits(loaded, [r.text for r in rows]), torch.tensor([r.label for r in rows])
    res: dict[str, Any] = accuracy_f1(logits.argmax(-1).tolist(), labels.tolist())
    return res | calibration(logits, labels, loaded.config.temperature)


def evaluate_probe(loaded: LoadedModel, data: Path, limit: int = 0) -> dict[str, Any]:
    """A hand-labelled probe (JSONL of text, label name, kind; training/probes/README.md): accuracy overall
    and per kind, and the mean top score of the wrong and of the right answers (and at T = 1)."""
    rows = read_probe(data, loaded.config.labels)
    rows = rows[:limit] if limit else rows
    logits = sentiment_logits(loaded, [r.text for r in rows])
    labels = torch.tensor([r.label for r in rows])
    probs, right = calibrated(logits, loaded.config.temperature), logits.argmax(-1) == labels

    def mean_top(p: torch.Tensor, mask: torch.Tensor) -> float | None:
        """The mean top score of the rows in mask (N,); None for no rows."""
        return round(p[mask].max(-1).values.mean().item(), 4) if mask.any() else None

    kinds = sorted({r.kind for r in rows})
    by_kind = {k: [i for i, r in enumerate(rows) if r.kind == k] for k in kinds}
    res: dict[str, Any] = {
        "accuracy": right.float().mean().item(),
        "n": len(rows),
        "mean_score_wrong": mean_top(probs, ~right),
        "mean_score_right": mean_top(probs, right),
        "accuracy_by_kind": {k: round(right[i].float().mean().item(), 4) for k, i in by_kind.items()},
        "n_by_kind": {k: len(i) for k, i in by_kind.items()},
    }
    if loaded.config.temperature != 1.0:
        res |= {
            "temperature": loaded.config.temperature,
            "mean_score_wrong_at_t1": mean_top(logits.softmax(-1), ~right),
        }
    return res | calibration(logits, labels, loaded.config.temperature)


def read_pairs(
    loaded: LoadedModel, data: Path, fmt: str, source_lang: str, target_lang: str
) -> tuple[list[str], list[str]]:
    if fmt == "tatoeba":
        pairs = read_tsv_pairs(data, source_lang, target_lang)
    else:  # multi30k: --data is the split prefix, e.g. .../multi30k/test -> test.de + test.en
        pairs = read_parallel(f"{data}.{source_lang}", f"{data}.{target_lang}")
    return [p.src for p in pairs], [p.tgt for p in pairs]


def evaluate_translation(
    loaded: LoadedModel,
    data: Path,
    fmt: str,
    options: DecodeOptions,
    limit: int = 0,
    source_lang: str | None = None,
    target_lang: str | None = None,
    ct2: CT2Decoder | None = None,
    decoder: Decodable[Any] | None = None,
    replace_unknowns: bool = False,
) -> dict[str, Any]:
    """BLEU and chrF of the best hypotheses, decoded by `decoder` (default: loaded.model, eager), or by
    CTranslate2 with `ct2`; replace_unknowns: output <unk>s replaced from the source (model/unknowns.py), as
    the server does."""
    src_lang = source_lang or loaded.config.source_langs[0]
    tgt_lang = target_lang or loaded.config.target_langs[0]
    srcs, refs = read_pairs(loaded, data, fmt, src_lang, tgt_lang)
    if limit:
        srcs, refs = srcs[:limit], refs[:limit]
    if ct2 is None:
        model = decoder or loaded.model
        hyps = translate_texts(
            model,  # type: ignore[arg-type]
            loaded.tokenizer,
            srcs,
            options,
            tgt_lang,
            replace_unknowns=replace_unknowns,
        )
        best = [h[0][0] for h in hyps]
    elif replace_unknowns:
        sources = [encode_source(loaded.tokenizer, t, loaded.config) for t in srcs]
        out = ct2.translate_ids(
            [s.ids for s in sources], options, tgt_lang, align_unknowns=[s.align for s in sources]
        )
        best = [restore_text(loaded.tokenizer, h[0], s) for h, s in zip(out, sources, strict=True)]
    else:  # APP_TRANSLATION_ENGINE=ctranslate2's decoding
        ids = [source_ids(loaded.tokenizer, t, loaded.config) for t in srcs]
        best = [loaded.tokenizer.decode(h[0].tokens) for h in ct2.translate_ids(ids, options, tgt_lang)]
    res = bleu_chrf(best, refs)
    res["decoding"] = {
        "beam_size": options.beam_size,
        "length_penalty": options.length_penalty,
        "max_length": options.max_length,
        "max_length_ratio": options.max_length_ratio,
        "max_length_offset": options.max_length_offset,
    }
    res["pair"] = f"{src_lang}-{tgt_lang}"
    res["replace_unknowns"] = replace_unknowns
    return res


def run(
    checkpoint: Path,
    data: Path,
    fmt: str,
    *,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    limit: int = 0,
    source_lang: str | None = None,
    target_lang: str | None = None,
    dtype: str = "float32",
    quantize: str | None = None,
    engine: str = "torch",
    replace_unknowns: bool = False,
) -> dict[str, Any]:
    """Score `checkpoint` on `data` (the CLI's work, callable from ship and tests) as the server runs it:
    translators traced (model.jit.trace_translator); `dtype`: the weights' and activations' type, as the server's
    APP_DTYPE (model cards report float32); `quantize`: "int8" as APP_QUANTIZE (CPU only); `engine`:
    "ctranslate2" as APP_TRANSLATION_ENGINE (translators, CPU, float32 or int8)."""
    device = "cuda" if torch.cuda.is_available() and quantize is None else "cpu"
    loaded = load_checkpoint(checkpoint, device=device, dtype=getattr(torch, dtype), quantize=quantize)
    decoder = trace_translator(loaded.model) if isinstance(loaded.model, Translator) else None
    t0 = time.time()
    if loaded.config.task == "sentiment":
        if engine != "torch":
            raise SystemExit(
                f"error: --engine {engine} decodes translators; {loaded.name} is a sentiment model"
            )
        if fmt not in SENTIMENT_FORMATS:
            raise SystemExit(
                f"error: --format {fmt} is a translation format; {loaded.name} is a sentiment model"
            )
        if fmt == "probe":
            res = evaluate_probe(loaded, data, limit)
        else:
            res = evaluate_sentiment(loaded, data, fmt, limit)
    else:
        if fmt not in ("tatoeba", "multi30k"):
            raise SystemExit(f"error: --format {fmt} is a sentiment format; {loaded.name} is a translator")
        opts = DecodeOptions(beam_size=beam_size, length_penalty=length_penalty)
        ct2 = None
        if engine == "ctranslate2":
            compute_type = "int8" if quantize == "int8" else dtype
            threads = torch.get_num_threads()
            ct2 = load_ct2_decoder(loaded, decoder, compute_type=compute_type, intra_threads=threads)
        res = evaluate_translation(
            loaded, data, fmt, opts, limit, source_lang, target_lang, ct2, decoder, replace_unknowns
        )
        res["engine"] = engine
    res["dtype"] = dtype
    if quantize is not None:
        res["quantize"] = quantize
    res["checkpoint"] = str(checkpoint)
    res["data"] = str(data)
    res["seconds"] = round(time.time() - t0, 1)
    return res


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint directory")
    p.add_argument(
        "--data", type=Path, required=True, help="data file (multi30k: split prefix, e.g. .../test)"
    )
    p.add_argument("--format", choices=FORMATS, required=True)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=0.6)
    p.add_argument("--limit", type=int, default=0, help="first N examples only (0 = all)")
    p.add_argument("--source-lang")
    p.add_argument("--target-lang")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="score the model as the server serves it with APP_DTYPE=... (default float32)",
    )
    p.add_argument(
        "--quantize",
        choices=MODES,
        help="score the model as the server serves it with APP_QUANTIZE=... (dynamic int8 Linear layers, CPU)",
    )
    p.add_argument(
        "--engine",
        choices=("torch", "ctranslate2"),
        default="torch",
        help="decode translations as the server does with APP_TRANSLATION_ENGINE=... (ctranslate2: CPU)",
    )
    p.add_argument(
        "--replace-unknowns",
        action="store_true",
        help="replace output <unk>s from the source as the server does by default (model/unknowns.py)",
    )
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    res = run(
        args.checkpoint,
        args.data,
        args.format,
        beam_size=args.beam_size,
        length_penalty=args.length_penalty,
        limit=args.limit,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        dtype=args.dtype,
        quantize=args.quantize,
        engine=args.engine,
        replace_unknowns=args.replace_unknowns,
    )
    print(json.dumps(res, ensure_ascii=False))
    return 0
