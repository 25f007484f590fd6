"""Glossaries (model/glossary.py): term matching, and terms through encode_source and restore with hand-built
output tokens and alignments (model/unknowns.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from model import Hypothesis, Tokenizer
from model.glossary import TERMS_OUT, TERMS_UNK, Glossary, normal, take_out
from model.unknowns import encode_source, restore_text
from tests.conftest import tiny_translation_config


@pytest.fixture(scope="module")
def tok(tiny_tokenizer_path: Path) -> Tokenizer:
    return Tokenizer(tiny_tokenizer_path)


def found(terms: dict[str, str], text: str) -> list[str]:
    """The matched source text of each match, in order."""
    return [text[a:b] for a, b, _ in Glossary.of(terms).find(text)]


def test_a_term_matches_at_word_boundaries_only() -> None:
    assert found({"chat": "cat"}, "Le chateau du chat.") == ["chat"]
    assert found({"chat": "cat"}, "un achat, un chat-bot, chats") == []
    assert found({"ordinateur": "computer"}, "l'ordinateur") == ["ordinateur"]  # the elided article is a word
    assert found({"chat": "cat"}, "(chat)") == ["chat"]


def test_a_term_matches_ignoring_case_and_spacing() -> None:
    assert found({"Chat": "cat"}, "CHAT et chat") == ["CHAT", "chat"]
    assert found({"salle de bain": "bathroom"}, "la Salle  de\u00a0bain") == ["Salle  de\u00a0bain"]
    assert found({"école": "school"}, "ÉCOLE") == ["ÉCOLE"]
    assert normal(" Salle  de Bain ") == "salle de bain"


def test_the_longest_match_wins() -> None:
    terms = {"machine": "engine", "machine à laver": "washing machine", "laver": "wash"}
    assert found(terms, "une machine à laver") == ["machine à laver"]
    assert found(terms, "laver la machine") == ["laver", "machine"]
    # overlapping matches of two terms: the longer one, wherever it starts
    assert found({"bon": "good", "très bon vin": "very good wine"}, "un très bon vin") == ["très bon vin"]


def test_unspaced_scripts_need_no_boundary() -> None:
    assert found({"東京": "Tokyo"}, "我住在東京。") == ["東京"]


def test_a_term_never_overlaps_what_is_taken() -> None:
    g = Glossary.of({"version deux": "v2"})
    assert g.find("la version deux", [(3, 10)]) == []
    assert g.find("la version deux", [(11, 11)]) == []  # an item taken out between its words
    assert g.find("la version deux", [(2, 2)]) == [(3, 15, "v2")]


def test_take_out_drops_a_space_beside_each_span() -> None:
    text = "Le chat noir."
    out, moved = take_out(text, [(3, 7)])
    assert out == "Le noir."
    assert (moved[3], moved[7], moved[len(text)]) == (2, 2, len(out))
    assert take_out("Chat noir.", [(0, 4)])[0] == "noir."


def test_terms_kept_come_out_as_given_where_the_output_aligns_them(tok: Tokenizer) -> None:
    """TERMS_KEPT (the server's): the model reads the term as written; the output word aligned to it becomes
    the target term; the words around it stay; the article aligned with it is not taken with it."""
    cfg = tiny_translation_config(tok.vocab_size, max_len=32)
    src = encode_source(tok, "le chat dort.", cfg, glossary=Glossary.of({"Chat": "Feline"}))
    assert src.ids == encode_source(tok, "le chat dort.", cfg).ids  # nothing hidden from the model
    [(a, b)] = src.terms
    assert src.surfaces[a] == "Feline"
    words = [tok.encode(w) for w in ("the", "cat", "sleeps.")]
    out = [t for w in words for t in w]
    eos = len(src.ids) - 1

    def aligned(*to_term: int) -> list[int]:  # the pieces of these words aligned to the term, others to EOS
        return [a if k in to_term else eos for k, w in enumerate(words) for _ in w]

    hyp = Hypothesis(out, -1.0, -1.0, aligned(1))
    assert restore_text(tok, hyp, src) == "the Feline sleeps."
    # "the" aligned to the term too: of the words aligned to it, as many as the target has are replaced,
    # those that read like it, else the last
    assert restore_text(tok, Hypothesis(out, -1.0, -1.0, aligned(0, 1)), src) == "the Feline sleeps."
    src = encode_source(tok, "le chat dort.", cfg, glossary=Glossary.of({"chat": "tHe CAT"}))
    assert (
        restore_text(tok, Hypothesis(out, -1.0, -1.0, aligned(1)), src) == "tHe CAT sleeps."
    )  # "the" repeated


def test_a_term_the_output_dropped_is_put_back_once(tok: Tokenizer) -> None:
    cfg = tiny_translation_config(tok.vocab_size, max_len=32)
    src = encode_source(tok, "le chat dort.", cfg, glossary=Glossary.of({"chat": "Feline"}))
    out = tok.encode("sleeps.")
    eos = len(src.ids) - 1
    hyp = Hypothesis(out, -1.0, -1.0, [eos] * len(out))  # nothing aligned to the term: it goes first
    assert restore_text(tok, hyp, src) == "Feline sleeps."
    assert restore_text(tok, Hypothesis(out, -1.0, -1.0), src) == "Feline sleeps."  # no alignment at all


def test_terms_as_placeholders_come_out_once(tok: Tokenizer) -> None:
    """TERMS_UNK (measured, not kept): each term one <unk> whose surface is its target; two output <unk>s
    picking the same term give the other term its place."""
    cfg = tiny_translation_config(tok.vocab_size, max_len=32)
    g = Glossary.of({"chat": "Feline", "chien": "Hound"})
    src = encode_source(tok, "le chat et un chien", cfg, glossary=g, terms=TERMS_UNK)
    held = [a for a, _ in src.terms]
    assert [src.ids[a] for a in held] == [tok.unk_id] * 2
    assert [src.surfaces[a] for a in held] == ["Feline", "Hound"]
    u, sp = tok.unk_id, tok.piece_to_id("▁")
    middle = tok.encode("and")
    out = [sp, u, *middle, sp, u]
    hyp = Hypothesis(out, -1.0, -1.0, [held[0], held[0], *[0] * len(middle), held[0], held[0]])
    assert restore_text(tok, hyp, src).split() == ["Feline", "and", "Hound"]


def test_terms_taken_out_come_back_as_items(tok: Tokenizer) -> None:
    cfg = tiny_translation_config(tok.vocab_size, max_len=32)
    g = Glossary.of({"chat": "Feline"})
    src = encode_source(tok, "le chat dort.", cfg, glossary=g, terms=TERMS_OUT)
    assert src.ids == encode_source(tok, "le dort.", cfg).ids
    assert [item for _, item in src.items] == ["Feline"]


def test_a_term_inside_a_protected_item_is_none(tok: Tokenizer) -> None:
    cfg = tiny_translation_config(tok.vocab_size, max_len=32)
    src = encode_source(tok, "le chat v2.3 dort.", cfg, glossary=Glossary.of({"v2": "version"}))
    assert src.terms == ()
    assert [item for _, item in src.items] == ["v2.3"]


def test_an_imported_marian_model_writes_each_term_once_on_both_engines(tmp_path: Path) -> None:
    """An imported OPUS-MT model (pair tokenizer, a >>tag<< before the source), untrained: whatever it writes,
    each term comes out once, the same on torch and CTranslate2."""
    pytest.importorskip("transformers")
    from engines.ct2_decode import load_ct2_decoder
    from model import DecodeOptions, Translator, load_checkpoint
    from model.alignment import align
    from model.inference import translate_ids
    from tests.tiny_marian import build_marian
    from training import import_marian

    folder = build_marian(tmp_path / "opus-mt-fr-ROMANCE", tags=("fra", "spa", "ita"), seed=3, train_steps=0)
    loaded = load_checkpoint(import_marian.import_marian(folder, tmp_path / "ours", ["fr"], ["es", "it"]))
    tok, cfg, model = loaded.tokenizer, loaded.config, loaded.model
    assert isinstance(model, Translator)
    g = Glossary.of({"chat": "Feline", "la maison": "Casa Grande"})
    sources = [encode_source(tok, t, cfg, glossary=g) for t in ["Le chat aime la maison.", "Un chat."]]
    seqs, opts = [s.ids for s in sources], DecodeOptions(beam_size=2, max_length=12)
    hyps = translate_ids(model, seqs, opts, "it")
    align(
        model,
        seqs,
        hyps,
        cfg.start_id("it"),
        [s.align for s in sources],
        source_prefix=cfg.source_prefix("it"),
    )
    torch_out = [restore_text(tok, h[0], s) for h, s in zip(hyps, sources, strict=True)]
    ct2 = load_ct2_decoder(loaded)
    hyps = ct2.translate_ids(seqs, opts, "it", align_unknowns=[s.align for s in sources])
    assert [restore_text(tok, h[0], s) for h, s in zip(hyps, sources, strict=True)] == torch_out
    assert (torch_out[0].count("Feline"), torch_out[0].count("Casa Grande")) == (1, 1), torch_out
    assert torch_out[1].count("Feline") == 1, torch_out


def test_terms_blank_on_either_side_are_none() -> None:
    assert Glossary.of({" ": "cat", "chat": " ", "chien": "dog"}).terms == (("chien", "dog"),)
