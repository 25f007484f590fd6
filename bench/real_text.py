"""Numbers, symbols and emoji through the shipped translators: how many come back exactly, with unknown-token
replacement off and on (model/unknowns.py), on both engines; and test-split BLEU off and on.

  python -m bench.real_text [--pairs fr-en,es-en] [--n 250] [--bleu-limit 0] [--seed 0] [--threads 1]

The set: --n test-split sentences per pair (seeded sample), each with one or two items inserted at word
boundaries (seeded): numbers, prices ("15 €", "20 $"), dates, percentages, times ("19:30"), single symbols
(& % $ € @ #) and emoji. An item counts as preserved when its exact text occurs in the best translation (beam 4,
length penalty 0.6, as the server's defaults). BLEU: the first --bleu-limit test sentences (0: all),
torch engine (the two engines give the same tokens; bench/ctranslate2.py checks that).
"""

from __future__ import annotations

import argparse
import platform
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from engines.ct2_decode import CT2Decoder, load_ct2_decoder
from model import DecodeOptions, LoadedModel, Translator, load_checkpoint
from model.inference import translate_texts
from model.jit import TracedTranslator, trace_translator
from model.preprocess import source_ids
from model.unknowns import encode_source, restore_text
from training.data import read_tsv_pairs, resolve_data_dir
from training.metrics import bleu_chrf

CORPUS = {"fr-en": "fra-eng", "es-en": "spa-eng"}
EMOJI = ["😀", "🎉", "👍", "❤️", "🚀", "😂🙏"]
SYMBOLS = ["&", "%", "$", "€", "@", "#"]


def _item(kind: str, rng: random.Random) -> str:
    """One item of `kind`, its text as written in French or Spanish."""
    if kind == "number":
        return str(rng.choice([rng.randint(2, 99), rng.randint(100, 9999), rng.randint(1900, 2030)]))
    if kind == "price":
        amount = rng.choice([str(rng.randint(2, 500)), f"{rng.randint(1, 99)},{rng.randint(10, 99)}"])
        return rng.choice([f"{amount} €", f"{amount} $", f"{amount}€", f"${amount}"])
    if kind == "date":
        return rng.choice(
            [
                f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{rng.randint(1990, 2030)}",
                f"{rng.randint(1990, 2030)}",
            ]
        )
    if kind == "percent":
        return rng.choice([f"{rng.randint(2, 99)} %", f"{rng.randint(2, 99)}%"])
    if kind == "time":
        return f"{rng.randint(7, 23)}:{rng.choice(['00', '15', '30', '45'])}"
    if kind == "symbol":
        return rng.choice(SYMBOLS)
    return rng.choice(EMOJI)


KINDS = ["number", "price", "date", "percent", "time", "symbol", "emoji"]


@dataclass(frozen=True)
class Case:
    text: str
    items: tuple[tuple[str, str], ...]  # (kind, text)


def build_set(sentences: Sequence[str], n: int, seed: int) -> list[Case]:
    """n sentences (seeded sample), each with one or two items inserted between words (not first)."""
    rng = random.Random(seed)
    cases = []
    for s in rng.sample(list(sentences), n):
        words = s.split(" ")
        items = []
        for _ in range(rng.choice([1, 1, 2])):
            kind = rng.choice(KINDS)
            item = _item(kind, rng)
            words.insert(rng.randint(1, len(words)), item)
            items.append((kind, item))
        cases.append(Case(" ".join(words), tuple(items)))
    return cases


Translate = Callable[[list[str], bool], list[str]]


def torch_engine(loaded: LoadedModel, decoder: TracedTranslator, opts: DecodeOptions) -> Translate:
    def run(texts: list[str], replace: bool) -> list[str]:
        out = translate_texts(decoder, loaded.tokenizer, texts, opts, replace_unknowns=replace)
        return [h[0][0] for h in out]

    return run


def ct2_engine(loaded: LoadedModel, ct2: CT2Decoder, opts: DecodeOptions, put_back: bool = True) -> Translate:
    """put_back=False: only the <unk>s the model wrote are replaced (what the model copies by itself)."""
    tok, cfg = loaded.tokenizer, loaded.config

    def run(texts: list[str], replace: bool) -> list[str]:
        if not replace:
            out = ct2.translate_ids([source_ids(tok, t, cfg) for t in texts], opts)
            return [tok.decode(h[0].tokens) for h in out]
        sources = [encode_source(tok, t, cfg) for t in texts]
        out = ct2.translate_ids([s.ids for s in sources], opts, align_unknowns=[True] * len(texts))
        return [restore_text(tok, h[0], s, put_back) for h, s in zip(out, sources, strict=True)]

    return run


def preserved(cases: Sequence[Case], outputs: Sequence[str]) -> tuple[Counter[str], Counter[str]]:
    """Per kind: items kept exactly, items in all."""
    kept: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for case, out in zip(cases, outputs, strict=True):
        for kind, item in case.items:
            total[kind] += 1
            kept[kind] += item in out
    return kept, total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", default="fr-en,es-en")
    p.add_argument("--n", type=int, default=250, help="sentences per pair")
    p.add_argument("--bleu-limit", type=int, default=0, help="first N test sentences for BLEU (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch and CTranslate2 threads")
    p.add_argument("--show", type=int, default=0, help="print this many lost items per pair (after)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    opts = DecodeOptions(beam_size=4, length_penalty=0.6)
    data = resolve_data_dir(None) / "tatoeba"
    print(f"CPU: {platform.processor() or platform.machine()}, torch threads {args.threads}")
    rows, bleu_rows = [], []
    for pair in args.pairs.split(","):
        src, tgt = pair.split("-")
        loaded = load_checkpoint(f"checkpoints/translate-{pair}", dtype=torch.float32)
        assert isinstance(loaded.model, Translator)
        decoder = trace_translator(loaded.model)  # as served
        ct2 = load_ct2_decoder(loaded, decoder, intra_threads=args.threads)
        test = read_tsv_pairs(data / CORPUS[pair] / "test.tsv", src, tgt)
        cases = build_set([x.src for x in test], args.n, args.seed)
        texts = [c.text for c in cases]
        outputs: dict[tuple[str, bool], list[str]] = {}
        for name, engine in (
            ("torch", torch_engine(loaded, decoder, opts)),
            ("ctranslate2", ct2_engine(loaded, ct2, opts)),
        ):
            for replace in (False, True):
                t0 = time.perf_counter()
                outputs[name, replace] = out = engine(texts, replace)
                kept, total = preserved(cases, out)
                rows.append((pair, name, replace, kept, total, time.perf_counter() - t0))
        t0 = time.perf_counter()
        kept, total = preserved(cases, ct2_engine(loaded, ct2, opts, put_back=False)(texts, True))
        rows.append((pair, "ctranslate2, no put-back", True, kept, total, time.perf_counter() - t0))
        same = sum(a == b for a, b in zip(outputs["torch", True], outputs["ctranslate2", True], strict=True))
        print(f"{pair}: torch and CTranslate2 identical on {same}/{len(cases)} sentences (replace on)")
        lost = [
            (c.text, item, o)
            for c, o in zip(cases, outputs["torch", True], strict=True)
            for _, item in c.items
            if item not in o
        ]
        for text, item, out in lost[: args.show]:
            print(f"  lost {item!r}: {text!r} -> {out!r}")
        refs_pairs = test[: args.bleu_limit] if args.bleu_limit else test
        srcs, refs = [x.src for x in refs_pairs], [x.tgt for x in refs_pairs]
        run = torch_engine(loaded, decoder, opts)
        for replace in (False, True, False, True):  # twice each, alternating: the seconds of the second
            t0 = time.perf_counter()
            hyps = run(srcs, replace)
            secs = time.perf_counter() - t0
            bleu_rows = [r for r in bleu_rows if r[:2] != (pair, replace)]
            bleu_rows.append((pair, replace, bleu_chrf(hyps, refs), sum("\u2047" in h for h in hyps), secs))
    print("\n| pair | engine | replace_unknowns | " + " | ".join(KINDS) + " | all | seconds |")
    print("|---|---|---|" + "---:|" * (len(KINDS) + 2))
    for pair, name, replace, kept, total, secs in rows:
        cells = [f"{kept[k]}/{total[k]}" for k in KINDS]
        share = 100 * sum(kept.values()) / max(1, sum(total.values()))
        print(
            f"| {pair} | {name} | {'on' if replace else 'off'} | "
            + " | ".join(cells)
            + f" | **{share:.1f}%** | {secs:.1f} |"
        )
    print("\n| pair | replace_unknowns | BLEU | chrF | n | outputs with ⁇ | seconds (torch) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for pair, replace, res, marks, secs in bleu_rows:
        on = "on" if replace else "off"
        print(f"| {pair} | {on} | {res['bleu']} | {res['chrf']} | {res['n']} | {marks} | {secs:.1f} |")


if __name__ == "__main__":
    main()
