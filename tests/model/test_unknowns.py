"""Unknown-token replacement (model/unknowns.py): chunk encoding, source picking, restoring, and a tiny model
whose answer is known."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model import DecodeOptions, Hypothesis, Tokenizer, Translator
from model.alignment import pick_sources
from model.inference import translate_texts
from model.preprocess import source_ids
from model.protect import find_items
from model.unknowns import (
    ITEMS_KEPT,
    SENTINEL,
    chunks,
    encode_source,
    restore,
    restore_hypothesis,
)
from tests.conftest import make_corpus, tiny_translation_config
from training.data import resolve_data_dir

FR_TEST = resolve_data_dir() / "tatoeba" / "fra-eng" / "test.tsv"  # $TRAINING_DATA_DIR or ../shared/data


@pytest.fixture(scope="module")
def tok(tiny_tokenizer_path: Path) -> Tokenizer:
    """The tiny tokenizer: its corpus has no digits, symbols or emoji, so they encode to <unk>."""
    return Tokenizer(tiny_tokenizer_path)


def piece(tok: Tokenizer, p: str) -> int:
    i = tok.piece_to_id(p)
    assert i != tok.unk_id, p
    return i


def test_text_without_unknowns_encodes_as_before(tok: Tokenizer) -> None:
    """Parity: where no <unk> and no protected item is involved the ids are source_ids' (the tiny corpus, and
    the fr-en test split with the shipped tokenizer when both are here)."""
    cfg = tiny_translation_config(tok.vocab_size, max_len=24)
    texts = make_corpus(100)
    for text in texts:
        assert encode_source(tok, text, cfg).ids == source_ids(tok, text, cfg)
    shipped = Path(__file__).resolve().parents[2] / "checkpoints" / "translate-fr-en" / "tokenizer.model"
    if FR_TEST.exists() and shipped.exists():
        real = Tokenizer(shipped)
        cfg = tiny_translation_config(real.vocab_size, max_len=66)
        lines = FR_TEST.read_text(encoding="utf-8").splitlines()[1:]
        for line in lines:
            fr = line.split("\t")[1]
            if real.unk_id not in real.encode(fr) and not find_items(fr):
                assert encode_source(real, fr, cfg).ids == source_ids(real, fr, cfg)


def test_each_chunk_is_one_unknown_with_its_surface(tok: Tokenizer) -> None:
    assert tok.encodes_unknown(SENTINEL)
    cfg = tiny_translation_config(tok.vocab_size)
    text = "Le chat aime 15 € et part 19:30. Mon ami 😀😀 https://x.org/a?b=1 !"
    src = encode_source(tok, text, cfg, items=ITEMS_KEPT)  # (by default these items are taken out)
    unknown = [s for i, s in zip(src.ids, src.surfaces, strict=True) if i == tok.unk_id]
    assert unknown == ["15 €", "19:30", "😀😀", "https://x.org/a?b=1"]
    assert src.ids[-1] == cfg.eos_id
    assert src.surfaces[-1] == ""
    assert "".join(src.surfaces).replace(" ", "") == text.replace(" ", "")


def test_chunks_keep_the_sentence_mark_and_skip_words() -> None:
    text = "Il a 2025 chats (12). Écrivez"
    unknown = [(5, 6), (18, 19), (22, 23)]  # "2" of 2025, "2" of 12, "É"
    assert [text[a:b] for a, b in chunks(text, unknown)] == ["2025", "12"]  # "(", ")." and words left out
    quoted = "Il a dit : « oui »"  # punctuation alone is the model's to render (English quotes), not an item
    assert chunks(quoted, [(10, 11), (12, 13), (18, 19)]) == []


def test_pick_sources_prefers_source_unknowns_for_output_unknowns() -> None:
    unk = 1
    src = [5, unk, 6, unk, 3]  # EOS last
    attn = torch.tensor(
        [
            [0.1, 0.5, 0.0, 0.3, 0.1],  # token "a": plain argmax -> 1
            [0.6, 0.1, 0.0, 0.2, 0.1],  # <unk>: source 0 is not unknown -> best unknown is 3
            [0.0, 0.0, 0.1, 0.0, 0.9],  # token "b": EOS never -> 2
        ]
    )
    assert pick_sources(attn, src, [7, unk, 8], unk) == [1, 3, 2]
    assert pick_sources(attn[:, :4], src, [7, unk, 8], unk) == [1, 3, 2]  # CTranslate2: no EOS column


def test_restore_spaces_merges_and_reattaches(tok: Tokenizer) -> None:
    u, sp = tok.unk_id, piece(tok, "\u2581")
    cat, dot = piece(tok, "\u2581maison"), piece(tok, ".")
    src = [cat, sp, u, dot, 3]
    surfaces = ("maison", " ", "12", ".", "")
    assert restore(tok, [cat, sp, u, dot], [0, 1, 2, 3], src, surfaces) == "maison 12."
    assert restore(tok, [cat, u, dot], [0, 2, 3], src, surfaces) == "maison12."
    assert restore(tok, [sp, u, u, cat], [1, 2, 2, 0], src, surfaces) == "12 maison"  # one run, one surface
    # dropped by the model: put back after the word aligned before it, ahead of the final mark
    assert restore(tok, [cat, dot], [0, 3], src, surfaces) == "maison 12."
    assert restore(tok, [cat, dot], [3, 3], src, surfaces) == "12 maison."  # nothing before it: first
    assert restore(tok, [cat, dot], [0, 3], src, surfaces, put_back=False) == "maison."
    # an unknown letter inside a word is not an item: never put back
    assert restore(tok, [cat, dot], [0, 3], src, ("maison", " ", "É", ".", "")) == "maison."


def test_restore_puts_back_items_taken_out(tok: Tokenizer) -> None:
    """Items taken out of the source come back where the output aligns to their place: at the word boundary
    most tokens agree with, ahead of the final mark, several at one place in source order."""
    cat, chien, dot = piece(tok, "\u2581maison"), piece(tok, "\u2581voiture"), piece(tok, ".")
    src = [cat, chien, dot, 3]  # "maison voiture ."
    surfaces = ("maison", " voiture", ".", "")
    tokens, alignment = [cat, chien, dot], [0, 1, 2]
    assert restore(tok, tokens, alignment, src, surfaces, items=((1, "12"),)) == "maison 12 voiture."
    assert restore(tok, tokens, alignment, src, surfaces, items=((0, "1."),)) == "1. maison voiture."
    assert restore(tok, tokens, alignment, src, surfaces, items=((2, "7"),)) == "maison voiture 7."
    two = ((1, "12"), (1, "€"))
    assert restore(tok, tokens, alignment, src, surfaces, items=two) == "maison 12 € voiture."
    # reordered output: "voiture" aligned after the item, "maison" before: the item goes between them
    assert restore(tok, [chien, cat, dot], [1, 0, 2], src, surfaces, items=((1, "5"),)) == "voiture maison 5."
    assert (
        restore(tok, tokens, alignment, src, surfaces, put_back=False, items=((1, "12"),))
        == "maison 12 voiture."
    )


def test_items_come_back_without_an_alignment(tok: Tokenizer) -> None:
    """A hypothesis with no alignment (CTranslate2 without a torch model) still gets its items back: first."""
    cat, dot = piece(tok, "\u2581maison"), piece(tok, ".")
    hyp = Hypothesis([cat, tok.unk_id, dot], -1.0, -1.0)
    src, surfaces = [cat, dot, 3], ("maison", ".", "")
    assert restore_hypothesis(tok, hyp, src, surfaces, ((1, "12"),)) == "12 maison."
    assert restore_hypothesis(tok, hyp, src, surfaces) == tok.decode(hyp.tokens)


def unk_emitter(vocab_size: int, emit: int) -> Translator:
    """A tiny translator that writes `emit` at every step: its decoder's final LayerNorm outputs one fixed
    vector whatever the input, and only `emit`'s output row points along it."""
    torch.manual_seed(0)
    model = Translator(tiny_translation_config(vocab_size, tie_embeddings=False)).eval()
    direction = torch.zeros(model.cfg.d_model)
    direction[0] = 1.0
    with torch.no_grad():
        model.decoder.norm.weight.zero_()
        model.decoder.norm.bias.copy_(direction)
        model.generator.weight.zero_()
        model.generator.weight[emit] = 10.0 * direction
    return model


@pytest.mark.parametrize("beam_size", [1, 3])
def test_tiny_model_gives_the_number_back(tok: Tokenizer, beam_size: int) -> None:
    """Items left in the source (ITEMS_KEPT): the model writes only <unk> (until EOS is forced): every one
    attends to the one source <unk>, "12", so the translation is "12" with replacement and a row of ⁇
    without."""
    model = unk_emitter(tok.vocab_size, tok.unk_id)
    opts = DecodeOptions(beam_size=beam_size)
    [[(on, _)]] = translate_texts(model, tok, ["le chat 12 ."], opts, replace_unknowns=True, items=ITEMS_KEPT)
    [[(off, _)]] = translate_texts(model, tok, ["le chat 12 ."], opts)
    assert on == "12"
    assert len(off.split()) > 1
    assert set(off.split()) == {tok.unk_surface.strip()}


def test_tiny_model_that_drops_the_number_gets_it_back(tok: Tokenizer) -> None:
    """A model that never writes <unk>: the source's number is put back once, between two words, taken out
    of the source or left in it as one <unk>."""
    model = unk_emitter(tok.vocab_size, piece(tok, "\u2581maison"))
    opts = DecodeOptions(beam_size=1)
    [[(on, _)]] = translate_texts(model, tok, ["le chat 12 ."], opts, replace_unknowns=True)
    [[(kept, _)]] = translate_texts(
        model, tok, ["le chat 12 ."], opts, replace_unknowns=True, items=ITEMS_KEPT
    )
    [[(off, _)]] = translate_texts(model, tok, ["le chat 12 ."], opts)
    [[(without, _)]] = translate_texts(model, tok, ["le chat ."], opts)  # what the model reads when taken out
    assert "12" not in off
    for words, rest in ((on.split(), without), (kept.split(), off)):
        assert words.count("12") == 1
        assert [w for w in words if w != "12"] == rest.split()


def test_hypothesis_alignment_defaults_to_none() -> None:
    assert Hypothesis([5], -1.0, -1.0).alignment is None


def test_marian_pair_tokenizer_with_a_source_tag(tmp_path: Path) -> None:
    """An imported OPUS-MT model (separate source and target sentencepiece models, a >>tag<< before the
    source): both engines replace alike, attention columns of the tag aside, and the number comes back."""
    pytest.importorskip("transformers")
    from engines.ct2_decode import load_ct2_decoder
    from model import load_checkpoint
    from model.tokenizer import PairTokenizer
    from model.unknowns import restore_text
    from tests.tiny_marian import build_marian
    from training import import_marian

    folder = build_marian(tmp_path / "opus-mt-fr-ROMANCE", tags=("fra", "spa", "ita"), seed=3, train_steps=0)
    loaded = load_checkpoint(import_marian.import_marian(folder, tmp_path / "ours", ["fr"], ["es", "it"]))
    tok, cfg = loaded.tokenizer, loaded.config
    assert isinstance(tok, PairTokenizer)
    assert isinstance(loaded.model, Translator)
    texts = ["Le chat aime la maison 12.", "Le chien voit 15 € et 😀.", "Le chat aime la maison."]
    sources = [encode_source(tok, t, cfg) for t in texts]
    assert sources[0].items == ((10, "12"),)  # before "."; the model reads "Le chat aime la maison."
    opts = DecodeOptions(beam_size=2, max_length=12)
    on = translate_texts(loaded.model, tok, texts, opts, "it", replace_unknowns=True)
    off = translate_texts(loaded.model, tok, texts, opts, "it")
    assert "12" in on[0][0][0]
    assert "15 €" in on[1][0][0]
    assert "😀" in on[1][0][0]
    assert on[2] == off[2]  # no <unk>: as before
    ct2 = load_ct2_decoder(loaded)
    hyps = ct2.translate_ids([s.ids for s in sources], opts, "it", align_unknowns=[s.align for s in sources])
    assert [restore_text(tok, h[0], s) for h, s in zip(hyps, sources, strict=True)] == [o[0][0] for o in on]
