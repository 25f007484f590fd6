"""Real-text items through the shipped translators: how many come back verbatim, and whether the rest of the
translation stays what the model gives the sentence without them; per way of encoding the items
(model.unknowns.encode_source: `kept` the former <unk> replacement and put-back, `unk` each item one <unk>,
`out` taken out and put back, the server's), on both engines; and test-split BLEU.

  python -m bench.real_text [--pairs fr-en,es-en] [--n 250] [--bleu-limit 0] [--seed 0] [--threads 1]

The set: --n test-split sentences per pair (seeded sample), each with one or two items inserted at word
boundaries (seeded), from every class of model/protect.py: numbers, prices, dates, percentages, times, phone
numbers, codes (v2.3, COVID-19, A4), URLs, e-mails, @mentions, #hashtags, symbols and emoji. An item counts as
surviving when its exact text occurs in the best translation (beam 4, length penalty 0.6, as the server's
defaults); the rest as unchanged when the translation without the items equals that of the sentence as it
was, comparing words only (lower case, letters and digits). Items also come as a list marker ("1. ", "• ")
opening the sentence, or as a letterless sentence after it ("7", "15 €."), joined as /translate does
(bench.real_text.through_text): both must come back unchanged. BLEU: the first --bleu-limit test sentences
(0: all), torch engine (the two engines give the same tokens; bench/ctranslate2.py checks that).
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
from model.protect import has_letters
from model.unknowns import ITEMS_KEPT, ITEMS_OUT, ITEMS_UNK, encode_source, restore_text
from training.data import read_tsv_pairs, resolve_data_dir
from training.metrics import bleu_chrf

CORPUS = {"fr-en": "fra-eng", "es-en": "spa-eng"}
EMOJI = ["😀", "🎉", "👍", "❤️", "🚀", "😂🙏"]
SYMBOLS = ["&", "%", "$", "€", "@", "#", "→", "©"]
CODES = ["v2.3", "COVID-19", "A4", "MP3", "B12", "iOS 17", "G7", "4K", "R2-D2", "F-16", "H2O", "v10"]
WORDS = ["tom", "marie", "info", "paris", "vacances", "photo", "jeu", "ete"]
MARKERS = ["1.", "2)", "•", "-", "a)", "12."]


def _item(kind: str, rng: random.Random) -> str:
    """One item of `kind`, its text as written in French or Spanish."""
    if kind == "number":
        return str(rng.choice([rng.randint(2, 99), rng.randint(100, 9999), rng.randint(1900, 2030), 7, 100]))
    if kind == "price":
        amount = rng.choice([str(rng.randint(2, 500)), f"{rng.randint(1, 99)},{rng.randint(10, 99)}"])
        return rng.choice([f"{amount} €", f"{amount} $", f"{amount}€", f"${amount}"])
    if kind == "date":
        return f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{rng.randint(1990, 2030)}"
    if kind == "percent":
        return rng.choice([f"{rng.randint(2, 99)} %", f"{rng.randint(2, 99)}%"])
    if kind == "time":
        return f"{rng.randint(7, 23)}:{rng.choice(['00', '15', '30', '45'])}"
    if kind == "phone":
        digits = [f"{rng.randint(0, 99):02d}" for _ in range(4)]
        return rng.choice(
            [f"06 {' '.join(digits)}", f"+33 6 {' '.join(digits)}", f"555-{rng.randint(1000, 9999)}"]
        )
    if kind == "code":
        return rng.choice(CODES)
    if kind == "url":
        return rng.choice(
            [f"https://{rng.choice(WORDS)}.org/{rng.choice(WORDS)}", f"www.{rng.choice(WORDS)}.fr"]
        )
    if kind == "email":
        return f"{rng.choice(WORDS)}.{rng.choice(WORDS)}@mail.com"
    if kind == "mention":
        return f"@{rng.choice(WORDS)}{rng.randint(1, 99)}"
    if kind == "hashtag":
        return f"#{rng.choice(WORDS)}"
    if kind == "symbol":
        return rng.choice(SYMBOLS)
    return rng.choice(EMOJI)


KINDS = [
    "number", "price", "date", "percent", "time", "phone", "code", "url", "email", "mention", "hashtag",
    "symbol", "emoji",
]  # fmt: skip
METHODS = [ITEMS_KEPT, ITEMS_UNK, ITEMS_OUT]


@dataclass(frozen=True)
class Case:
    text: str
    items: tuple[tuple[str, str], ...]  # (kind, text)
    plain: str = ""  # the sentence without its items


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
        cases.append(Case(" ".join(words), tuple(items), s))
    return cases


def through_set(sentences: Sequence[str], n: int, seed: int) -> list[tuple[str, list[str]]]:
    """n texts (seeded) of two test sentences each behind a list marker ("1. A 2. B"), or one sentence and a
    letterless one ("A 7", "A 15 €."), with the pieces that must come back unchanged."""
    rng = random.Random(seed + 1)
    out = []
    for _ in range(n):
        a, b = rng.sample(list(sentences), 2)
        if rng.random() < 0.5:
            m1, m2 = rng.sample(MARKERS, 2)
            out.append((f"{m1} {a} {m2} {b}", [m1, m2]))
        else:
            tail = _item(rng.choice(["number", "price", "percent", "time", "emoji"]), rng)
            tail += rng.choice(["", "."])
            out.append((f"{a} {tail}", [tail]))
    return out


def words_only(text: str) -> str:
    """Lower case, letters and digits only: what "unchanged" compares."""
    return "".join(c for c in text.lower() if c.isalnum())


def unchanged(cases: Sequence[Case], outputs: Sequence[str], plain: Sequence[str]) -> int:
    """Cases whose translation, its items removed, equals (words only) the plain sentence's translation."""
    same = 0
    for case, out, ref in zip(cases, outputs, plain, strict=True):
        for _, item in case.items:
            out = out.replace(item, " ", 1)
        same += words_only(out) == words_only(ref)
    return same


Translate = Callable[[list[str], str | None], list[str]]  # texts, items encoding (None: replacement off)


def torch_engine(loaded: LoadedModel, decoder: TracedTranslator, opts: DecodeOptions) -> Translate:
    def run(texts: list[str], items: str | None) -> list[str]:
        on = items is not None
        out = translate_texts(decoder, loaded.tokenizer, texts, opts, replace_unknowns=on, items=items or "")
        return [h[0][0] for h in out]

    return run


def ct2_engine(loaded: LoadedModel, ct2: CT2Decoder, opts: DecodeOptions, put_back: bool = True) -> Translate:
    """put_back=False: only the <unk>s the model wrote are replaced, and items taken out come back."""
    tok, cfg = loaded.tokenizer, loaded.config

    def run(texts: list[str], items: str | None) -> list[str]:
        if items is None:
            out = ct2.translate_ids([source_ids(tok, t, cfg) for t in texts], opts)
            return [tok.decode(h[0].tokens) for h in out]
        sources = [encode_source(tok, t, cfg, items=items) for t in texts]
        out = ct2.translate_ids([s.ids for s in sources], opts, align_unknowns=[s.align for s in sources])
        return [restore_text(tok, h[0], s, put_back) for h, s in zip(out, sources, strict=True)]

    return run


def through_text(run: Translate, text: str, lang: str, items: str | None) -> str:
    """A text as /translate answers it: split into sentences, letterless ones passed through, the others
    translated, joined by spaces."""
    from app.text.sentences import split_line  # the service's splitter (bench only: model/ stays below app)

    sentences = split_line(lang, text)
    todo = [s for s in sentences if has_letters(s)]
    done = iter(run(todo, items))
    return " ".join(next(done) if has_letters(s) else s for s in sentences)


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
    p.add_argument("--bleu-methods", default=f"off,{ITEMS_KEPT},{ITEMS_OUT}", help="encodings scored by BLEU")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch and CTranslate2 threads")
    p.add_argument("--show", type=int, default=0, help="print this many changed sentences per pair (out)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    opts = DecodeOptions(beam_size=4, length_penalty=0.6)
    data = resolve_data_dir(None) / "tatoeba"
    print(f"CPU: {platform.processor() or platform.machine()}, torch threads {args.threads}", flush=True)
    rows, bleu_rows, through_rows = [], [], []
    for pair in args.pairs.split(","):
        src, tgt = pair.split("-")
        loaded = load_checkpoint(f"checkpoints/translate-{pair}", dtype=torch.float32)
        assert isinstance(loaded.model, Translator)
        decoder = trace_translator(loaded.model)  # as served
        ct2 = load_ct2_decoder(loaded, decoder, intra_threads=args.threads)
        test = read_tsv_pairs(data / CORPUS[pair] / "test.tsv", src, tgt)
        cases = build_set([x.src for x in test], args.n, args.seed)
        texts = [c.text for c in cases]
        engines = {"torch": torch_engine(loaded, decoder, opts), "ctranslate2": ct2_engine(loaded, ct2, opts)}
        plain = engines["torch"]([c.plain for c in cases], ITEMS_OUT)  # the sentences have no items
        outputs: dict[tuple[str, str | None], list[str]] = {}
        runs = [("torch", None), *(("torch", m) for m in METHODS), ("ctranslate2", ITEMS_OUT)]
        for name, items in runs:
            t0 = time.perf_counter()
            outputs[name, items] = out = engines[name](texts, items)
            kept, total = preserved(cases, out)
            same = unchanged(cases, out, plain)
            rows.append((pair, name, items, kept, total, same, time.perf_counter() - t0))
        t0 = time.perf_counter()
        out = ct2_engine(loaded, ct2, opts, put_back=False)(texts, ITEMS_OUT)
        kept, total = preserved(cases, out)
        rows.append(
            (pair, "ctranslate2, no put-back", ITEMS_OUT, kept, total, unchanged(cases, out, plain),
             time.perf_counter() - t0)
        )  # fmt: skip
        same = sum(
            a == b
            for a, b in zip(outputs["torch", ITEMS_OUT], outputs["ctranslate2", ITEMS_OUT], strict=True)
        )
        print(
            f"{pair}: torch and CTranslate2 identical on {same}/{len(cases)} sentences (items out)",
            flush=True,
        )
        shown = 0
        for c, o, ref in zip(cases, outputs["torch", ITEMS_OUT], plain, strict=True):
            if shown < args.show and (any(i not in o for _, i in c.items) or unchanged([c], [o], [ref]) == 0):
                print(f"  {c.text!r} -> {o!r} (without: {ref!r})")
                shown += 1
        listed = through_set([x.src for x in test], args.n, args.seed)
        for items in (None, ITEMS_OUT):
            answers = [through_text(engines["torch"], t, src, items) for t, _ in listed]
            good = sum(
                all(piece in a for piece in pieces) and a.startswith(pieces[0]) == t.startswith(pieces[0])
                for (t, pieces), a in zip(listed, answers, strict=True)
            )
            through_rows.append((pair, items, good, len(listed)))
        refs_pairs = test[: args.bleu_limit] if args.bleu_limit else test
        srcs, refs = [x.src for x in refs_pairs], [x.tgt for x in refs_pairs]
        run = engines["torch"]
        for method in args.bleu_methods.split(","):
            items = None if method == "off" else method
            t0 = time.perf_counter()
            hyps = run(srcs, items)
            secs = time.perf_counter() - t0
            bleu_rows.append((pair, items, bleu_chrf(hyps, refs), sum("\u2047" in h for h in hyps), secs))
    print("\n| pair | engine | items | " + " | ".join(KINDS) + " | surviving | rest unchanged | seconds |")
    print("|---|---|---|" + "---:|" * (len(KINDS) + 3))
    for pair, name, items, kept, total, same, secs in rows:
        cells = [f"{kept[k]}/{total[k]}" for k in KINDS]
        share = 100 * sum(kept.values()) / max(1, sum(total.values()))
        print(
            f"| {pair} | {name} | {items or 'off'} | " + " | ".join(cells)
            + f" | **{share:.1f}%** | {100 * same / max(1, args.n):.1f}% | {secs:.1f} |"
        )  # fmt: skip
    print("\n| pair | items | markers and letterless sentences unchanged |")
    print("|---|---|---:|")
    for pair, items, good, n in through_rows:
        print(f"| {pair} | {items or 'off'} | {good}/{n} |")
    print("\n| pair | items | BLEU | chrF | n | outputs with ⁇ | seconds (torch) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for pair, items, res, marks, secs in bleu_rows:
        print(
            f"| {pair} | {items or 'off'} | {res['bleu']} | {res['chrf']} | {res['n']} | {marks} | {secs:.1f} |"
        )


if __name__ == "__main__":
    main()
