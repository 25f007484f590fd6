"""Invisible format characters (model/format_chars.py): taken out of what the model reads (model/protect.py)
and put back balanced (model/unknowns.py), per class; a round trip on the shipped fr-en model."""

from __future__ import annotations

from pathlib import Path

import pytest

from model import DecodeOptions, Hypothesis, Tokenizer
from model.format_chars import CLOSERS, FORMAT, OPENERS, closer, match, place, strip_format
from model.protect import Protected, protect
from model.unknowns import encode_source, restore, restore_text
from tests.conftest import tiny_translation_config

FR_EN = Path(__file__).resolve().parents[2] / "checkpoints" / "translate-fr-en"
LRE, RLE, PDF, LRO, RLO = "\u202a", "\u202b", "\u202c", "\u202d", "\u202e"
LRI, RLI, FSI, PDI = "\u2066", "\u2067", "\u2068", "\u2069"
LRM, RLM, ALM = "\u200e", "\u200f", "\u061c"
ZWSP, ZWNJ, ZWJ, WJ, BOM, SHY = "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"
# one sentence per class, and what the model reads: the sentence without them
CLASSES = {
    "embedding": f"Le {LRE}chat{PDF} dort {RLE}bien{PDF}.",
    "override": f"{RLO}Le chat dort{PDF} sur {LRO}le canapé{PDF}.",
    "isolate": f"Le {LRI}chat{PDI} {RLI}dort{PDI} {FSI}bien{PDI}.",
    "mark": f"{RLM}Le chat{LRM} dort{ALM} bien.",
    "zero-width space": f"Le chat{ZWSP} dort bien.{ZWSP}",
    "joiner in a Latin word": f"Le cha{ZWJ}t dort{ZWNJ} bien.",
    "word joiner": f"Le chat{WJ} dort bien.",
    "BOM": f"{BOM}Le chat dort bien.",
    "soft hyphen": f"Le chat dort sur le cana{SHY}pé.",
    "invisible operator and deprecated": "Le chat\u2062 dort\u206a bien.",
}


def balanced(text: str) -> bool:
    """Every opener closed by its own closer, innermost first; no closer without its opener."""
    stack: list[str] = []
    for c in text:
        if c in OPENERS:
            stack.append(c)
        elif c in CLOSERS and (not stack or closer(stack.pop()) != c):
            return False
    return not stack


def without(text: str) -> str:
    return "".join(c for c in text if c not in FORMAT)


@pytest.fixture(scope="module")
def tok(tiny_tokenizer_path: Path) -> Tokenizer:
    return Tokenizer(tiny_tokenizer_path)


@pytest.mark.parametrize("name", CLASSES)
def test_the_model_never_reads_them(tok: Tokenizer, name: str) -> None:
    """Each class: the ids are those of the sentence without them (tiny tokenizer, and the shipped fr-en
    one when it is here), and each character is kept to be put back."""
    text = CLASSES[name]
    read = protect(text)
    assert read.text == without(text)
    assert "".join(c for _, c in read.controls) == "".join(c for c in text if c in FORMAT)
    tokenizers = [tok] + ([Tokenizer(FR_EN / "tokenizer.model")] if FR_EN.exists() else [])
    for t in tokenizers:
        cfg = tiny_translation_config(t.vocab_size, max_len=64)
        src = encode_source(t, text, cfg)
        assert src.ids == encode_source(t, without(text), cfg).ids
        assert len(src.controls) == len(read.controls)
        assert src.align == 2  # the output is aligned to put them back


def test_joiners_that_shape_text_stay() -> None:
    """ZWJ inside an emoji sequence stays in the emoji item; ZWNJ in a Persian word stays in the word."""
    family = f"👨{ZWJ}👩{ZWJ}👧"
    assert protect(f"Bravo {family} !") == Protected("Bravo !", ((5, family),))
    persian = f"می{ZWNJ}خواهم"
    assert strip_format(persian).text == persian
    assert strip_format(f"cha{ZWJ}t").text == "chat"  # inside a Latin word: taken out


def test_characters_glued_to_an_item_travel_inside_it() -> None:
    """A pair around an item, or a mark glued to it, stays in the item; an opener whose closer is beyond
    the item does not."""
    assert protect(f"{RLI}COVID-19{PDI} est là.") == Protected("est là.", ((0, f"{RLI}COVID-19{PDI}"),))
    assert protect(f"Il paie {RLM}20 %{LRM}.") == Protected("Il paie.", ((7, f"{RLM}20 %{LRM}"),))
    assert protect(f"{RLO}20 % de plus{PDF}") == Protected(
        "de plus", ((0, "20 %"),), (), ((0, RLO), (7, PDF))
    )


def test_pairs_as_the_bidi_algorithm_pairs_them() -> None:
    assert match([RLO, PDF]) == [(0, 1)]
    assert match([LRI, RLE, PDI]) == [(0, 2), (1, 2)]  # the PDI closes the embedding opened inside
    assert match([RLI, PDF, PDI]) == [(0, 2)]  # a PDF cannot close an isolate: dropped
    assert match([PDI, LRO]) == [(1, None)]  # a stray closer; an opener left open


@pytest.mark.parametrize(
    ("chars", "aligned", "placed"),
    [
        # a sentence-wide wrap (closer after the final "."), whatever the alignment
        (((0, LRI), (4, PDI)), [3, 2, 1, 0, 3], [(0, LRI), (5, PDI)]),
        # the closer before the final "." goes before the output's
        (((0, RLO), (3, PDF)), [0, 1, 2, 3], [(0, RLO), (3, PDF)]),
        # inner span: the output tokens aligned to source 1..2, reordered
        (((1, RLI), (3, PDI)), [0, 2, 1, 3], [(1, RLI), (3, PDI)]),
        # nothing aligned inside: dropped whole; a stray closer: dropped
        (((1, RLI), (2, PDI), (2, PDF)), [0, 0, 2, 3], []),
        # left open: closed at the end
        (((1, RLE),), [0, 1, 2, 3], [(1, RLE), (4, PDF)]),
        # marks: at the edges, before the final punctuation, before the token aligned to the word after
        (((0, RLM), (1, LRM), (3, ALM), (4, LRM)), [1, 0, 2, 3], [(0, RLM), (0, LRM), (3, ALM), (4, LRM)]),
        # other invisibles: not put back
        (((0, BOM), (2, ZWSP), (4, ZWSP), (3, SHY)), [0, 1, 2, 3], []),
    ],
)
def test_place(chars: tuple[tuple[int, str], ...], aligned: list[int], placed: list[tuple[int, str]]) -> None:
    """A source of 4 pieces and EOS (4), its final "." at 3; an output of len(aligned) tokens, "." last."""
    out = place(chars, aligned, 4, (3, len(aligned) - 1))
    assert out == placed
    assert balanced("".join(c for _, c in out))


def test_a_pair_crossing_one_placed_is_dropped() -> None:
    """Source pieces 0..5, EOS 6: isolates around 1..2 and around 3; the output interleaves them."""
    chars = ((1, RLI), (3, PDI), (3, LRI), (4, PDI))
    assert place(chars, [0, 1, 3, 2, 3, 5], 6, (5, 5)) == [(1, RLI), (4, PDI)]
    assert place(chars, [0, 1, 2, 3, 4, 5], 6, (5, 5)) == [(1, RLI), (3, PDI), (3, LRI), (4, PDI)]


def test_restore_wraps_what_the_pair_wrapped(tok: Tokenizer) -> None:
    """The tiny tokenizer, output tokens chosen by hand: the isolate wraps the word it wrapped, reordered;
    a sentence-wide override wraps the whole output, its closer kept before the final "."."""
    cfg = tiny_translation_config(tok.vocab_size)
    src = encode_source(tok, f"{RLI}maison{PDI} voiture.", cfg)
    assert src.ids == encode_source(tok, "maison voiture.", cfg).ids
    house, car, dot = (tok.piece_to_id(p) for p in ("\u2581maison", "\u2581voiture", "."))
    assert tok.unk_id not in (house, car, dot)
    assert src.ids[:3] == [house, car, dot]
    tokens, alignment = [car, house, dot], [1, 0, 2]
    out = restore(tok, tokens, alignment, src.ids, src.surfaces, controls=src.controls)
    assert out == f"voiture {RLI}maison{PDI}."
    src = encode_source(tok, f"{RLI}{RLO}maison{PDF}{PDI} voiture.", cfg)  # nested: both after the space
    out = restore(tok, tokens, alignment, src.ids, src.surfaces, controls=src.controls)
    assert out == f"voiture {RLI}{RLO}maison{PDF}{PDI}."
    src = encode_source(tok, f"{RLO}maison voiture{PDF}.", cfg)
    out = restore(tok, tokens, alignment, src.ids, src.surfaces, controls=src.controls)
    assert out == f"{RLO}voiture maison{PDF}."


def test_without_an_alignment_only_edges_come_back(tok: Tokenizer) -> None:
    """CTranslate2 without a torch model to align: a sentence-wide pair still wraps the output; a pair
    inside is dropped whole."""
    cfg = tiny_translation_config(tok.vocab_size)
    src = encode_source(tok, f"{LRI}{RLI}maison{PDI} voiture.{PDI}", cfg)
    house, car, dot = (tok.piece_to_id(p) for p in ("\u2581maison", "\u2581voiture", "."))
    hyp = Hypothesis([car, house, dot], -1.0, -1.0)
    assert restore_text(tok, hyp, src) == f"{LRI}voiture maison.{PDI}"


@pytest.mark.skipif(not (FR_EN / "model.safetensors").exists(), reason="no shipped fr-en checkpoint")
def test_shipped_model_round_trip() -> None:
    """The shipped fr-en model: the translation is the one of the sentence without the characters, with
    them put back balanced (issue 43: an RLO kept without its PDF reversed the rest of the line)."""
    from model import load_checkpoint
    from model.inference import translate_texts

    loaded = load_checkpoint(FR_EN)
    texts = [
        f"{RLO}Le chat dort{PDF} {RLM}sur le canapé{LRM}. ",
        f"Le {RLI}chat{PDI} dort{ZWSP} sur le cana{SHY}pé.",
        f"{LRI}Le chat dort sur le canapé.{PDI}",
        f"{RLE}Le chat dort sur le canapé.",  # left open: closed at the end
        f"Le chat dort sur le canapé.{PDF}",  # a stray closer: dropped
    ]
    opts = DecodeOptions(beam_size=4)
    out = [
        h[0][0] for h in translate_texts(loaded.model, loaded.tokenizer, texts, opts, replace_unknowns=True)
    ]
    plain = translate_texts(loaded.model, loaded.tokenizer, ["Le chat dort sur le canapé."], opts)[0][0][0]
    assert all(balanced(o) for o in out), out
    assert [without(o) for o in out] == [plain] * len(texts)
    assert plain == "The cat is sleeping on the couch."
    assert out[0] == f"{RLO}The cat is sleeping{PDF} {RLM}on the couch{LRM}."  # was "\u202eeep a cat sleep …"
    assert out[1] == f"The {RLI}cat{PDI} is sleeping on the couch."
    assert out[2] == f"{LRI}{plain}{PDI}"
    assert out[3] == f"{RLE}{plain}{PDF}"
    assert out[4] == plain
