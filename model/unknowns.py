"""Protected items and unknown-token replacement: items (model/protect.py: numbers, codes, links, emoji, list
markers) are taken out of the source and put back where the output aligns to their place; an output <unk>
becomes the source text it attends to most (Luong et al., 2015; CTranslate2's `replace_unknowns`).

A tokenizer without byte fallback maps characters it never saw (digits, `€ % @ #`, emoji) to <unk>. Three parts:

- `encode_source`: the items taken out (`ITEMS_OUT`: the model reads the sentence as written without them;
  `ITEMS_UNK`, measured and not kept: each item one <unk>), then each run of unknown characters in a number, price, date, symbol group, URL or e-mail (a
  `chunk`) becomes one <unk> of the source, so the model sees one unknown where the text has one item (a run
  split by known characters, "2025" -> "▁ <unk> 0 <unk>", would need the model to copy that pattern), and each
  source id keeps its surface text; a glossary's terms (model/glossary.py) stay in, their first piece's
  surface the target term.
- `pick_sources` (model/alignment.py, the torch half): per output token, the source position of highest
  attention (last decoder layer, mean over heads); for an output <unk>, among the source's <unk>s when it
  has some. Both engines compute the same matrix: torch by one teacher-forced pass over the hypotheses that need it (`align`), CTranslate2
  during its search (`return_attention`).
- `restore`: the detokenized text with each output <unk> replaced by its source surface (a run of <unk>s
  that pick the same position gives it once), and each chunk the model dropped put back after the output
  word aligned just before it (`reattach`), as is each item taken out: every item comes back once, verbatim;
  then the bidi controls and marks taken out (model/format_chars.py), balanced (`with_controls`). The output
  words aligned to a glossary term become its target term (model.glossary.replaced), put back like an item
  when none is.

A source without items whose source and output hold no <unk> is encoded, decoded and answered exactly as
without replacement.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from model.config import ModelConfig
from model.format_chars import CLOSERS, place
from model.glossary import TERMS_KEPT, TERMS_OUT, TERMS_UNK, Glossary, Span, as_items, replaced, written_once
from model.options import Hypothesis
from model.protect import find_items, has_letters, protect
from model.tokenizer import PairTokenizer, Tokenizer

AnyTokenizer = Tokenizer | PairTokenizer
SENTINEL = "\ue000"  # a private-use character: one <unk> for a tokenizer without byte fallback
_AHEAD = "\ufdd0"  # a noncharacter before a format character put back that binds to what follows
_LINK = r"(?:https?://|www\.)\S+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # URL, e-mail
_ITEM = r"[^\w\s]|[\d_]"  # a character that is neither a letter nor a space
# a link, or non-letters with spaces inside ("15 €", "1 000")
_CHUNK = re.compile(rf"{_LINK}|(?:{_ITEM})+(?:[ \u00a0\u202f]+(?:{_ITEM})+)*")
_SIGNS = "%&@#*/\\§‰"  # punctuation by their Unicode category, copied as symbols
ITEMS_OUT, ITEMS_UNK, ITEMS_KEPT = "out", "unk", "kept"  # encode_source's `items`
ALIGN_UNKNOWNS, ALIGN_ALL = 1, 2  # engines' per-source alignment: hypotheses with an <unk> (True), or all


@dataclass(frozen=True)
class Source:
    """A translator source: ids (pieces + EOS, within max_source_len) and the source text of each id; the
    items taken out, each (the source position it stood before, its text); `verbatim`: the text to answer
    as it came when nothing is left to translate (no letter outside its items)."""

    ids: list[int]
    surfaces: tuple[str, ...]  # (S,): "" for EOS and for pieces that cover no character
    items: tuple[tuple[int, str], ...] = ()
    verbatim: str | None = None
    controls: tuple[tuple[int, str], ...] = ()  # format characters: (source position it stood before, char)
    terms: tuple[Span, ...] = ()  # glossary terms' source positions: the surface at the start is the target

    @property
    def align(self) -> int:
        """What the engines align (`needs_alignment`): every hypothesis when items or format characters were
        taken out."""
        return ALIGN_ALL if self.items or self.controls or self.terms else ALIGN_UNKNOWNS


def chunks(text: str, unknown: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character spans of `text` to encode as one <unk> each: URLs, e-mails and runs of non-letters (spaces
    inside) that hold an unknown character (`unknown`: the spans of the tokenizer's <unk> pieces), without
    known punctuation at either end (a sentence's final "." stays the model's)."""
    bad = [False] * len(text)
    for a, b in unknown:
        bad[a:b] = [True] * (b - a)
    spans = []
    for m in _CHUNK.finditer(text):
        a, b = m.span()
        while a < b and _trimmed(text[a], bad[a]):
            a += 1
        while b > a and _trimmed(text[b - 1], bad[b - 1]):
            b -= 1
        if any(bad[a:b]) and is_item(text[a:b]):
            spans.append((a, b))
    return spans


def is_item(text: str) -> bool:
    """A number, symbol, emoji, URL or e-mail: text to copy, unlike punctuation alone (": «", which the
    model renders in the target's own way) or a word."""
    if not _CHUNK.fullmatch(text):
        return False
    if re.fullmatch(_LINK, text):
        return True
    return any(c.isdigit() or c in _SIGNS or unicodedata.category(c).startswith("S") for c in text)


def _trimmed(char: str, unknown: bool) -> bool:
    return char.isspace() or (not unknown and unicodedata.category(char).startswith("P"))


def encode_source(
    tokenizer: AnyTokenizer,
    text: str,
    cfg: ModelConfig,
    cut: bool = True,
    items: str = ITEMS_OUT,
    glossary: Glossary | None = None,
    terms: str = TERMS_KEPT,
) -> Source:
    """`model.preprocess.source_ids` with protected items (`items`: ITEMS_OUT taken out, ITEMS_UNK each one
    <unk>, ITEMS_KEPT left in), the `glossary`'s terms (`terms`: TERMS_KEPT read as written, TERMS_UNK each
    one <unk>, TERMS_OUT taken out and put back as an item, as without a placeholder: model/glossary.py) and
    each remaining chunk as one <unk>, and every id's surface text (a term's first: its target term);
    cut=False keeps every piece (a caller that refuses long sources counts them)."""
    placeholders = tokenizer.encodes_unknown(SENTINEL)  # one <unk> for a quantity (model.protect.is_quantity)
    protected = protect(text, placeholders) if items == ITEMS_OUT else None
    body = text if protected is None else protected.text
    out = list(protected.items) if protected else []
    controls = list(protected.controls) if protected else []
    quantities = list(protected.quantities) if protected else []
    blocked = [(at, at) for at, _ in out] + quantities if protected else find_items(text)
    found = glossary.find(body, blocked) if glossary else []
    matched = bool(found)
    if found and (terms == TERMS_OUT or (terms == TERMS_UNK and not placeholders)):
        body, out, controls, quantities = as_items(body, found, out, controls, quantities)
        found = []
    in_body = [(a, b) for a, b, _ in found]
    masked = in_body if terms != TERMS_KEPT else []  # the terms as placeholders
    ids, offsets = tokenizer.encode_with_offsets(body)
    spans = find_items(text) if items == ITEMS_UNK else quantities
    if (spans or masked or cfg.unk_id in ids) and placeholders:
        unknown = [o for i, o in zip(ids, offsets, strict=True) if i == cfg.unk_id]
        spans = sorted({*spans, *chunks(body, unknown)}, key=lambda s: (s[0], -s[1]))
        spans = [s for k, s in enumerate(spans) if not (k and s[0] < spans[k - 1][1])]  # disjoint
        spans = sorted([*(s for s in spans if not _overlaps(s, in_body)), *masked])  # terms over chunks
        if spans:
            masked_text, origin = _mask(body, spans)
            ids, offsets = tokenizer.encode_with_offsets(masked_text)
            offsets = [(origin[a][0], origin[b - 1][1]) if a < b else (0, 0) for a, b in offsets]
    n = cfg.max_source_len - 1 if cut else len(ids)
    surfaces = [body[a:b] for a, b in offsets[:n]] + [""]
    held = []
    for a, b, target in found:  # the pieces it covers (all there unless cut off)
        covers = [k for k, o in enumerate(offsets[:n]) if o[0] < o[1] and _overlaps(o, [(a, b)])]
        if covers:
            surfaces[covers[0]] = target
            held.append((covers[0], covers[-1] + 1))
    if not (out or controls or held):
        return Source(ids[:n] + [cfg.eos_id], tuple(surfaces))
    starts = [a for a, _ in offsets[:n]]  # an item stands before the first piece that starts at or after it
    items_at = tuple((sum(a < at for a in starts), item) for at, item in out)
    # a format character: after the pieces ending at or before it (before "▁sur" in "dort \u200fsur")
    controls_at = tuple((sum(0 < b <= at for _, b in offsets[:n]), c) for at, c in controls)
    verbatim = None if has_letters(body) or matched else text  # (terms taken out may leave no letter)
    return Source(ids[:n] + [cfg.eos_id], tuple(surfaces), items_at, verbatim, controls_at, tuple(held))


def _overlaps(span: tuple[int, int], others: Iterable[tuple[int, int]]) -> bool:
    return any(a < span[1] and span[0] < b for a, b in others)


def _mask(text: str, spans: list[tuple[int, int]]) -> tuple[str, list[tuple[int, int]]]:
    """`text` with each span replaced by SENTINEL, and per character of the result its span in `text`."""
    out, origin, pos = [], [], 0
    for a, b in spans:
        out.append(text[pos:a])
        origin += [(i, i + 1) for i in range(pos, a)]
        out.append(SENTINEL)
        origin.append((a, b))
        pos = b
    out.append(text[pos:])
    origin += [(i, i + 1) for i in range(pos, len(text))]
    return "".join(out), origin


def needs_alignment(
    src_ids: Sequence[int], tokens: Sequence[int], unk_id: int, want: int = ALIGN_UNKNOWNS
) -> bool:
    """Whether `restore` reads an alignment: `want` ALIGN_ALL (items were taken out of the source), or
    ALIGN_UNKNOWNS (True) and the output or the source (EOS aside) holds an <unk>; never when `want` is 0."""
    return want == ALIGN_ALL or (bool(want) and (unk_id in tokens or unk_id in src_ids[:-1]))


def reattach(
    tokenizer: AnyTokenizer,
    tokens: Sequence[int],
    alignment: Sequence[int],
    src_ids: Sequence[int],
    surfaces: Sequence[str],
    put_back: bool = True,
    items: Sequence[tuple[int, str]] = (),
    terms: Sequence[Span] = (),
) -> tuple[list[int], list[int], tuple[str, ...]]:
    """Tokens, alignment and surfaces with a word-initial <unk> put back for each item taken out of the
    source (`items`: the source position it stood before, its text; its <unk> aligned to its own surface,
    appended) and (put_back) each source chunk (an <unk> whose surface is a whole `chunks` item, not an
    unknown letter of a word) and each glossary term (`terms`: its source positions; an output <unk> picks
    it as model.glossary.written_once and .replaced say) that no output <unk> picked: at the word boundary,
    ahead of the output's final punctuation, that most output tokens agree with (aligned to the source
    before it: ahead; the others: after); several at one place in source order."""
    unk, n = tokenizer.unk_id, len(surfaces)
    held = [a for a, b in terms if b == a + 1 and src_ids[a] == unk]  # TERMS_UNK's placeholders
    tokens, alignment = written_once(tokens, alignment, held, unk)
    if kept := [(a, b, surfaces[a]) for a, b in terms if a not in held]:  # TERMS_KEPT
        pieces, space = tokenizer.pieces(list(tokens)), tokenizer.piece_to_id("\u2581")
        space = None if space == unk else space
        tokens, alignment = replaced(pieces, tokens, alignment, kept, unk, space)
    picked = {a for t, a in zip(tokens, alignment, strict=True) if t == unk}
    missing = [
        (u, u)
        for u in range(len(src_ids) - 1)
        if u not in picked
        and (
            (src_ids[u] == unk and (u in held or (put_back and is_item(surfaces[u].strip()))))
            or any(u == a for a, _, _ in kept)
        )
    ]
    missing += [(u, n + k) for k, (u, _) in enumerate(items)]  # (stood before, surface index)
    surfaces = (*surfaces, *(text for _, text in items))
    if not missing:
        return list(tokens), list(alignment), surfaces
    pieces = tokenizer.pieces(list(tokens))
    end = _final_punctuation(pieces)
    words = [k for k in range(end + 1) if k in (0, end) or not _continues_word(pieces[k])]  # word starts
    known = [(j, a) for j, (t, a) in enumerate(zip(tokens, alignment, strict=True)) if t != unk and j < end]
    places = []
    for u, fill in sorted(missing):
        # the word boundary that most output tokens agree with: those aligned before u ahead of it, the
        # rest after it (one stray alignment moves it less than the last-aligned-word rule); ties: later
        agree = [sum((j < k) == (a < u) for j, a in known) for k in words]
        best = max(range(len(words)), key=lambda w: (agree[w], w))
        places.append((words[best], fill))
    space = tokenizer.piece_to_id("\u2581")
    mark = [space] if space != unk else []  # no "▁" piece: nothing to mark a word start with
    out_tokens, out_alignment = list(tokens), list(alignment)
    for k, fill in reversed(places):  # from the back: earlier ones go in front at the same place
        out_tokens[k:k] = [*mark, unk]
        out_alignment[k:k] = [fill] * (len(mark) + 1)
    return out_tokens, out_alignment, surfaces


def _continues_word(piece: str) -> bool:
    return not piece.startswith("\u2581") and any(c.isalnum() for c in piece)


def _final_punctuation(pieces: Sequence[str]) -> int:
    """Where the output's final run of punctuation pieces (". ", '?"') starts (len(pieces) if none)."""
    k = len(pieces)
    while k > 0 and not any(c.isalnum() for c in pieces[k - 1]) and pieces[k - 1].strip("\u2581"):
        k -= 1
    return k


def restore(
    tokenizer: AnyTokenizer,
    tokens: Sequence[int],
    alignment: Sequence[int],
    src_ids: Sequence[int],
    surfaces: Sequence[str],
    put_back: bool = True,
    items: Sequence[tuple[int, str]] = (),
    controls: Sequence[tuple[int, str]] = (),
    terms: Sequence[Span] = (),
) -> str:
    """Detokenize `tokens` with each <unk> replaced by the surface of its source position (`alignment`, one
    per token; the <unk>s of a run that picked the same position give it once), the items taken out put
    back, (put_back) the source's chunks and the glossary terms no output <unk> picked (`reattach`) and the
    format characters taken out put back balanced (`with_controls`)."""
    n = len(surfaces)
    tokens, alignment, surfaces = reattach(
        tokenizer, tokens, alignment, src_ids, surfaces, put_back, items, terms
    )
    if controls:
        tokens, alignment, surfaces = with_controls(
            tokenizer, tokens, alignment, surfaces, n, items, controls
        )
    text = tokenizer.decode_marked(tokens)
    parts = text.split(tokenizer.unk_surface.strip())  # (a stripped text may have lost an end's space)
    unks = [j for j, t in enumerate(tokens) if t == tokenizer.unk_id]
    if not unks or len(parts) != len(unks) + 1:  # (a literal unk surface in the output: left alone)
        return tokenizer.decode(tokens)
    pad = tokenizer.unk_surface[:1] if tokenizer.unk_surface[:1].isspace() else ""
    for k in range(len(parts)):  # the unk surface's own spaces go: "a  ⁇ ." -> "a " + fill + "."
        if k < len(parts) - 1 and pad and parts[k].endswith(pad):
            parts[k] = parts[k][: -len(pad)]
        if k > 0 and pad and parts[k].startswith(pad):
            parts[k] = parts[k][len(pad) :]
    fills = []
    for j in unks:
        same = j > 0 and tokens[j - 1] == tokenizer.unk_id and alignment[j - 1] == alignment[j]
        fills.append("" if same else surfaces[alignment[j]].strip())
    out = parts[0]
    for fill, part in zip(fills, parts[1:], strict=True):
        if is_item(fill):  # "19:30" + "0.": digits glued on (a chunk ends where its digits do);
            part = part.lstrip(
                "0123456789"
            )  # the model learned "<unk>0" from numbers split by unknown digits
        out += fill + part
    if controls:
        # openers and marks put before a "▁word" go after its space: "a <LRI>word", not "a<LRI> word"
        ahead = re.compile(f"((?:{_AHEAD}.)+)( ?)")
        out = ahead.sub(lambda m: m[2] + m[1].replace(_AHEAD, ""), out).removeprefix(" ")
    return out


def with_controls(
    tokenizer: AnyTokenizer,
    tokens: Sequence[int],
    alignment: Sequence[int],
    surfaces: Sequence[str],
    n: int,
    items: Sequence[tuple[int, str]],
    controls: Sequence[tuple[int, str]],
) -> tuple[list[int], list[int], tuple[str, ...]]:
    """`reattach`'s tokens, alignment and surfaces with an <unk> per format character put back
    (model.format_chars.place; `n`: the source's length, EOS last), aligned to its own surface."""
    # per token its source position: an item's put-back tokens stand where the item stood
    aligned = [a if a < n else items[a - n][0] if a < n + len(items) else None for a in alignment]
    k = n - 1  # where the source's final punctuation starts
    while k > 0 and surfaces[k - 1].strip() and not any(c.isalnum() for c in surfaces[k - 1]):
        k -= 1
    places = place(controls, aligned, n - 1, (k, _final_punctuation(tokenizer.pieces(list(tokens)))))
    fills = [c if c in CLOSERS else _AHEAD + c for _, c in places]
    out_tokens, out_alignment = list(tokens), list(alignment)
    for m, (at, _) in reversed(list(enumerate(places))):  # from the back: same place, listed order kept
        out_tokens.insert(at, tokenizer.unk_id)
        out_alignment.insert(at, len(surfaces) + m)
    return out_tokens, out_alignment, (*surfaces, *fills)


def restore_text(tokenizer: AnyTokenizer, hyp: Hypothesis, source: Source, put_back: bool = True) -> str:
    """A hypothesis' text: the source itself when it has nothing to translate, else `restore_hypothesis`."""
    if source.verbatim is not None:
        return source.verbatim
    return restore_hypothesis(
        tokenizer, hyp, source.ids, source.surfaces, source.items, put_back, source.controls, source.terms
    )


def restore_hypothesis(
    tokenizer: AnyTokenizer,
    hyp: Hypothesis,
    src_ids: Sequence[int],
    surfaces: Sequence[str],
    items: Sequence[tuple[int, str]] = (),
    put_back: bool = True,
    controls: Sequence[tuple[int, str]] = (),
    terms: Sequence[Span] = (),
) -> str:
    """`restore` with the hypothesis' alignment; without one (CTranslate2 with no torch model to align what
    it decoded without attention), plain detokenization, or, when items, format characters or glossary terms
    were taken out, each <unk> dropped, the items and terms put back at the output's start and the format
    characters at its edges: an item or a term is never lost."""
    if hyp.alignment is not None:
        args = (put_back, items, controls, terms)
        return restore(tokenizer, hyp.tokens, hyp.alignment, src_ids, surfaces, *args)
    if not (items or controls or terms):
        return tokenizer.decode(hyp.tokens)
    eos = [len(src_ids) - 1] * len(hyp.tokens)  # EOS: aligned after every item, its surface ""
    return restore(tokenizer, hyp.tokens, eos, src_ids, surfaces, False, items, controls, terms)
