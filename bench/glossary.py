"""Glossaries through the shipped fr-en translator: how many terms come out exactly as given, per kind, and
test-split BLEU on the same sentences with and without the glossary; per way of encoding the terms
(model.glossary: `unk` one placeholder each, the server's with a tokenizer that has one; `out` taken out and
put back as an item), on both engines.

  python -m bench.glossary [--n 300] [--seed 0] [--threads 1] [--show 0]

The set: --n test-split sentences (seeded sample of those with a term to give), each with 1-3 terms, built
from the data: a French word or phrase of the source mapped to the word or phrase of its English reference that
co-occurs with it most (Dice coefficient over the training split's pairs, at least MIN_DICE). Kinds: `name`
(a capitalised word inside a sentence: Tom, Boston, Marie -> Mary), `product` (an everyday object:
voiture -> car), `multiword` (two or three words: salle de bain -> bathroom, tous les jours -> every day),
`inflected` (a plural or conjugated form: chats -> cats, mangeait -> was eating). A term is given in lower
case unless it is a name (matching is case-insensitive); its target is the reference's own words. A term
counts as given when its target occurs in the best translation (beam 4, length penalty 0.6: the server's
defaults), case and all.
"""

from __future__ import annotations

import argparse
import platform
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from engines.ct2_decode import CT2Decoder, load_ct2_decoder
from model import DecodeOptions, LoadedModel, Translator, load_checkpoint
from model.alignment import align
from model.glossary import TERMS_KEPT, TERMS_OUT, TERMS_UNK, Glossary
from model.inference import translate_ids
from model.jit import TracedTranslator, trace_translator
from model.unknowns import Source, encode_source, restore_text
from training.data import read_tsv_pairs, resolve_data_dir
from training.metrics import bleu_chrf

KINDS = ("name", "product", "multiword", "inflected")
MIN_DICE, MIN_COUNT = 0.3, 3  # a term's target: co-occurs with it in at least 30% of their sentences
_WORD = re.compile(r"[^\W\d_]+")  # French: an elided article is a word of its own ("l", "ordinateur")
_WORD_EN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")  # English: a contraction is one ("I'm", "don't")
STOP_FR = {
    "le", "la", "les", "l", "un", "une", "des", "de", "du", "d", "à", "au", "aux", "et", "ou", "en", "dans", "sur", "pour", "par", "avec", "sans", "ce", "cet", "cette", "ces", "je", "tu", "il", "elle", "on", "nous", "vous", "ils", "elles", "me", "te", "se", "m", "t", "s", "n", "ne", "pas", "que", "qu", "qui", "est", "a", "y", "son", "sa", "ses", "mon", "ma", "mes", "ton", "ta", "tes", "leur", "leurs", "lui", "plus", "très", "bien", "si", "mais",
}  # fmt: skip
STOP_EN = {
    "the", "a", "an", "of", "to", "in", "on", "at", "for", "with", "and", "or", "is", "are", "was", "were", "be", "i", "you", "he", "she", "it", "we", "they", "me", "him", "her", "us", "them", "my", "your", "his", "its", "our", "their", "this", "that", "not", "do", "does", "did",
}  # fmt: skip
PRODUCTS = {
    "voiture", "voitures", "ordinateur", "ordinateurs", "téléphone", "téléphones", "vélo", "vélos", "montre", "montres", "télévision", "télé", "caméra", "appareil", "radio", "livre", "livres", "stylo", "stylos", "parapluie", "lunettes", "clé", "clés", "sac", "sacs", "chaussures", "piano", "guitare", "avion", "moto", "lampe", "réfrigérateur", "frigo", "chaise", "chaises", "lit", "table", "tables", "bateau", "train", "camion", "portable", "chapeau", "manteau", "robe", "chemise", "bouteille", "tasse", "verre", "couteau",
}  # fmt: skip
INFLECTED_FR = ("s", "x", "ait", "aient", "ons", "ez", "ent", "é", "ée", "és", "ées", "ais", "iez", "ions")
INFLECTED_EN = ("s", "ed", "ing")


@dataclass(frozen=True)
class Case:
    src: str
    ref: str
    terms: tuple[tuple[str, str, str], ...]  # (kind, source term, target term)

    @property
    def glossary(self) -> Glossary:
        return Glossary.of({s: t for _, s, t in self.terms})


class Cooccurrence:
    """Which sentences of the training pairs hold a word sequence, per side: Dice coefficients of a source
    and a target sequence."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.words = [
            ([w.lower() for w in _WORD.findall(s)], [w.lower() for w in _WORD.findall(t)]) for s, t in pairs
        ]
        self.index: tuple[dict[str, set[int]], dict[str, set[int]]] = (defaultdict(set), defaultdict(set))
        for i, sides in enumerate(self.words):
            for side, words in enumerate(sides):
                for w in words:
                    self.index[side][w].add(i)
        self._cache: dict[tuple[int, tuple[str, ...]], set[int]] = {}

    def holding(self, side: int, gram: tuple[str, ...]) -> set[int]:
        if (side, gram) not in self._cache:
            ids = set.intersection(*(self.index[side].get(w, set()) for w in gram))
            if len(gram) > 1:
                ids = {i for i in ids if _contains(self.words[i][side], gram)}
            self._cache[side, gram] = ids
        return self._cache[side, gram]

    def dice(self, f: tuple[str, ...], e: tuple[str, ...]) -> float:
        a, b = self.holding(0, f), self.holding(1, e)
        if len(a) < MIN_COUNT or not b:
            return 0.0
        return 2 * len(a & b) / (len(a) + len(b))


def _lower(pattern: re.Pattern[str], text: str) -> list[str]:
    return [w.lower() for w in pattern.findall(text)]


def _contains(words: list[str], gram: tuple[str, ...]) -> bool:
    n = len(gram)
    return any(tuple(words[k : k + n]) == gram for k in range(len(words) - n + 1))


def _grams(words: list[str], sizes: Sequence[int]) -> list[tuple[int, tuple[str, ...]]]:
    return [(k, tuple(words[k : k + n])) for n in sizes for k in range(len(words) - n + 1)]


def candidates(src: str, ref: str, co: Cooccurrence) -> dict[str, list[tuple[str, str, tuple[int, int]]]]:
    """Per kind, (source term, target term, source word span) pairs that `src` and `ref` offer."""
    sw, ew = list(_WORD.finditer(src)), list(_WORD_EN.finditer(ref))
    fl, el = [m.group().lower() for m in sw], [m.group().lower() for m in ew]
    targets = [(k, g) for k, g in _grams(el, (1, 2)) if g[0] not in STOP_EN and g[-1] not in STOP_EN]
    out: dict[str, list[tuple[str, str, tuple[int, int]]]] = defaultdict(list)
    for k, f in _grams(fl, (1, 2, 3)):
        if f[0] in STOP_FR or f[-1] in STOP_FR or min(map(len, f)) < 2:
            continue
        if len(f) > 1 and any(sw[k + m].group()[0].isupper() for m in range(len(f))):
            continue  # a phrase with a name in it: the name is the term
        scored = [(co.dice(f, e), j, e) for j, e in targets]
        best = max(scored, default=(0.0, 0, ()))
        if best[0] < MIN_DICE:
            continue
        _, j, e = best
        source = src[sw[k].start() : sw[k + len(f) - 1].end()]
        target = ref[ew[j].start() : ew[j + len(e) - 1].end()]
        if len(f) > 1:
            kind = "multiword"
        elif source[0].isupper() and src[: sw[k].start()].rstrip()[-1:] not in ("", ".", "!", "?"):
            kind = "name"
        elif f[0] in PRODUCTS:
            kind = "product"
        elif f[0].endswith(INFLECTED_FR) and e[-1].endswith(INFLECTED_EN) and len(f[0]) > 3:
            kind = "inflected"
        else:
            continue
        term = source if kind == "name" else source.lower()
        if Glossary.of({term: target}).find(src):  # as the server matches it ("aide" is not in "aide-moi")
            out[kind].append((term, target, (k, k + len(f))))
    return out


def build_set(pairs: Sequence[tuple[str, str]], co: Cooccurrence, n: int, seed: int) -> list[Case]:
    """Up to n cases, each of 1-3 non-overlapping terms of distinct kinds where it can (seeded)."""
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    cases = []
    for i in order:
        src, ref = pairs[i]
        offered = candidates(src, ref, co)
        if not offered:
            continue
        kinds = list(offered)
        rng.shuffle(kinds)
        terms: list[tuple[str, str, str]] = []
        spans: list[tuple[int, int]] = []
        for kind in kinds[: rng.randint(1, 3)]:
            s, t, (a, b) = rng.choice(offered[kind])
            if not any(a < y and x < b for x, y in spans) and all(t not in u for _, _, u in terms):
                terms.append((kind, s, t))
                spans.append((a, b))
        cases.append(Case(src, ref, tuple(terms)))
        if len(cases) == n:
            break
    return cases


Translate = Callable[[list[Case], str | None], list[str]]  # cases, terms (None: no glossary) -> best outputs


def encoded(loaded: LoadedModel, cases: list[Case], terms: str | None) -> list[Source]:
    """Each case's source as the server encodes it, with its glossary in mode `terms` (None: without one)."""
    return [
        encode_source(
            loaded.tokenizer,
            c.src,
            loaded.config,
            glossary=c.glossary if terms else None,
            terms=terms or TERMS_KEPT,
        )
        for c in cases
    ]


def torch_engine(loaded: LoadedModel, decoder: TracedTranslator, opts: DecodeOptions) -> Translate:
    tok, cfg = loaded.tokenizer, loaded.config

    def run(cases: list[Case], terms: str | None) -> list[str]:
        sources = encoded(loaded, cases, terms)
        seqs = [s.ids for s in sources]
        hyps = translate_ids(decoder, seqs, opts, None, 64)
        assert isinstance(loaded.model, Translator)
        align(loaded.model, seqs, hyps, cfg.start_id(None), [s.align for s in sources], 64)
        return [restore_text(tok, h[0], s) for h, s in zip(hyps, sources, strict=True)]

    return run


def ct2_engine(loaded: LoadedModel, ct2: CT2Decoder, opts: DecodeOptions) -> Translate:
    tok = loaded.tokenizer

    def run(cases: list[Case], terms: str | None) -> list[str]:
        sources = encoded(loaded, cases, terms)
        out = ct2.translate_ids([s.ids for s in sources], opts, align_unknowns=[s.align for s in sources])
        return [restore_text(tok, h[0], s) for h, s in zip(out, sources, strict=True)]

    return run


def given(cases: Sequence[Case], outputs: Sequence[str]) -> tuple[Counter[str], Counter[str], int]:
    """Per kind: terms whose target occurs in the output as given, terms in all; and the terms whose target
    occurs exactly as often as in the reference."""
    kept: Counter[str] = Counter()
    total: Counter[str] = Counter()
    once = 0
    for case, out in zip(cases, outputs, strict=True):
        for kind, _, target in case.terms:
            total[kind] += 1
            kept[kind] += target in out
            once += out.count(target) == case.ref.count(target)
    return kept, total, once


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=300, help="sentences")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch and CTranslate2 threads")
    p.add_argument("--show", type=int, default=0, help="print this many sentences missing a term")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    opts = DecodeOptions(beam_size=4, length_penalty=0.6)
    data = resolve_data_dir(None) / "tatoeba" / "fra-eng"
    print(f"CPU: {platform.processor() or platform.machine()}, torch threads {args.threads}", flush=True)
    train = read_tsv_pairs(data / "train.tsv", "fr", "en")
    test = read_tsv_pairs(data / "test.tsv", "fr", "en")
    t0 = time.perf_counter()
    co = Cooccurrence([(x.src, x.tgt) for x in train])
    cases = build_set([(x.src, x.tgt) for x in test], co, args.n, args.seed)
    print(
        f"{len(cases)} sentences, {sum(len(c.terms) for c in cases)} terms ({time.perf_counter() - t0:.0f} s)"
    )
    loaded = load_checkpoint("checkpoints/translate-fr-en", dtype=torch.float32)
    assert isinstance(loaded.model, Translator)
    decoder = trace_translator(loaded.model)  # as served
    ct2 = load_ct2_decoder(loaded, decoder, intra_threads=args.threads)
    engines = {"torch": torch_engine(loaded, decoder, opts), "ctranslate2": ct2_engine(loaded, ct2, opts)}
    refs = [c.ref for c in cases]
    rows = []
    runs = [
        ("torch", None),
        *(("torch", t) for t in (TERMS_KEPT, TERMS_UNK, TERMS_OUT)),
        ("ctranslate2", None),
    ]
    runs.append(("ctranslate2", TERMS_KEPT))
    outputs = {}
    for name, terms in runs:
        t0 = time.perf_counter()
        outputs[name, terms] = out = engines[name](cases, terms)
        kept, total, once = given(cases, out)
        rows.append((name, terms, kept, total, once, bleu_chrf(out, refs), time.perf_counter() - t0))
    shown = 0
    for c, o in zip(cases, outputs["torch", TERMS_KEPT], strict=True):
        if shown < args.show and any(t not in o for _, _, t in c.terms):
            print(f"  {c.src!r} {[(s, t) for _, s, t in c.terms]} -> {o!r} (ref {c.ref!r})")
            shown += 1
    head = " | ".join(KINDS) + " | terms as given | as often as the reference | BLEU | chrF | seconds |"
    print(f"\n| engine | glossary | {head}")
    print("|---|---|" + "---:|" * (len(KINDS) + 5))
    n = sum(len(c.terms) for c in cases)
    for name, terms, kept, total, once, res, secs in rows:
        cells = [f"{kept[k]}/{total[k]}" for k in KINDS] if terms else ["-"] * len(KINDS)
        share = f"**{100 * sum(kept.values()) / max(1, sum(total.values())):.1f}%**" if terms else "-"
        print(
            f"| {name} | {terms or 'none'} | " + " | ".join(cells)
            + f" | {share} | {once}/{n} | {res['bleu']} | {res['chrf']} | {secs:.1f} |"
        )  # fmt: skip
    print(f"\nn = {len(cases)} sentences; {rows[0][5]['bleu_signature']}")


if __name__ == "__main__":
    main()
