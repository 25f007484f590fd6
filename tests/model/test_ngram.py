"""The hashed n-gram head: features, spec parsing, and a classifier that adds its logits to the encoder's."""

from __future__ import annotations

import hashlib
import random
import re
import zlib
from pathlib import Path

import pytest
import torch

from model import SentimentClassifier, Tokenizer, load_checkpoint, save_checkpoint
from model.inference import classify_ids, classify_texts
from model.jit import compile_classifier
from model.ngram import NgramSpec, bags, features, hash_texts, text_units
from model.ngram_text import NO_NGRAM, NgramText, ngram_text
from model.preprocess import classifier_ids
from tests.conftest import tiny_sentiment_config

B = 1 << 20


def test_spec_parse() -> None:
    assert NgramSpec.parse("w3c4") == NgramSpec(3, 4)
    assert str(NgramSpec(2, 0)) == "w2c0"
    for bad in ("w3", "w0c4", "ngram-w3c4", "w10c1"):
        with pytest.raises(ValueError, match="wWcC"):
            NgramSpec.parse(bad)


def test_features_are_distinct_hashed_ngrams() -> None:
    words = NgramSpec(2, 0)
    assert len(features("good movie", words, B)) == 3  # good, movie, "good movie"
    assert features("GOOD<br />movie", words, B) == features("good movie", words, B)
    assert len(features("good good good", words, B)) == 2  # good, "good good"
    with_chars = features("ab", NgramSpec(1, 2), B)  # word "ab"; chars " ", a, b, " a", ab, "b "
    assert len(with_chars) == 1 + 6
    assert set(features("ab", NgramSpec(1, 0), B)) < set(with_chars)
    assert max(features("x", words, 7)) < 7
    # word order matters for bigrams, not for unigrams
    assert set(features("a b", words, B)) != set(features("b a", words, B))
    assert len(set(features("a b", words, B)) & set(features("b a", words, B))) == 2
    # Hangul, emoji and an empty text hash like anything else
    assert len(features("재밌다 👍", NgramSpec(1, 1), B)) > 0
    assert len(features("", NgramSpec(3, 4), B)) > 0  # the padding spaces: a blank text still has a bag


def test_a_batch_hashes_each_text_as_alone() -> None:
    texts = ["good movie", "", "재밌다 👍 good", "good movie", "a", "not a good movie at all !"]
    for spec in (NgramSpec(3, 4), NgramSpec(2, 0)):
        ids, lengths = hash_texts(texts, spec, B)
        assert lengths.tolist() == [len(features(t, spec, B)) for t in texts]
        alone = [i for t in texts for i in features(t, spec, B)]
        assert ids.tolist() == alone  # no n-gram spans two texts, duplicates only within a text
        ids_t, offsets = bags(texts, spec, B)
        assert ids_t.tolist() == alone
        assert offsets.tolist() == [0, *lengths.cumsum(0)[:-1].tolist()]
    assert hash_texts([], NgramSpec(3, 4), B)[0].shape == (0,)


M64 = (1 << 64) - 1


def _reference(text: str, spec: NgramSpec, buckets: int) -> list[int]:
    """The hash by its definition, one n-gram at a time in Python ints (uint64 arithmetic mod 2^64)."""

    def mix(h: int) -> int:  # splitmix64's finalizer
        h ^= h >> 30
        h = h * 0xBF58476D1CE4E5B9 & M64
        h ^= h >> 27
        h = h * 0x94D049BB133111EB & M64
        return h ^ h >> 31

    words = re.findall(r"\w+|[^\w\s]", text.lower().replace("<br />", " "))
    units = (
        [zlib.crc32(w.encode("utf-8", "surrogatepass")) for w in words],  # kind 0: words
        [ord(c) for c in f" {' '.join(words)} "],  # kind 1: characters
    )
    ids = set()
    for kind, max_order in ((0, spec.words), (1, spec.chars)):
        for n in range(1, max_order + 1):
            for i in range(len(units[kind]) - n + 1):
                h = 0
                for u in units[kind][i : i + n]:  # rolling: h * multiplier + next unit
                    h = (h * 0x9E3779B97F4A7C15 + u) & M64
                salt = (kind * 10 + n + 1) * 0xD6E8FEB86659FD93 & M64
                ids.add(mix((h + salt) & M64) % buckets)
    return sorted(ids)


def test_a_text_split_where_it_is_tokenized_hashes_the_same() -> None:
    """text_units of texts given as their ngram_text (what an HTTP process sends) equal those of the
    strings, mixed in one batch too: the same units, so the same n-grams."""
    texts = ["good movie", "", "GOOD<br />movie", "재밌다 👍 good", "a \ud800 b", "  ", "not a good movie !"]
    from_strings = text_units(texts)
    for given in (
        [ngram_text(t) for t in texts],
        [ngram_text(t) if i % 2 else t for i, t in enumerate(texts)],
    ):
        assert all(torch.equal(a, b) for a, b in zip(text_units(given), from_strings, strict=True))
    words = [zlib.crc32(w) for w in (b"good", b",", b"good", b".")]
    assert ngram_text("Good, good.") == NgramText(words, " good , good . ")
    assert all(t.numel() == 0 for t in text_units([NO_NGRAM])[::2])


def test_hashing_matches_its_definition_on_random_texts() -> None:
    """The batched tensor hashing (int64 wrapping as uint64, logical shifts, unsigned modulo) equals the
    one-n-gram-at-a-time definition: Hangul, emoji, a lone surrogate, dotted İ, <br />, blank texts."""
    rng = random.Random(0)
    alphabet = [*"abcdefghij klmnop.,!?<br />", "재", "밌", "다", "👍", "é", "\ud800", "ß", "İ", "\n", "\t"]
    for _ in range(30):
        texts = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
            for _ in range(rng.randint(1, 12))
        ]
        for spec, buckets in ((NgramSpec(3, 4), 2097152), (NgramSpec(2, 0), 1000003), (NgramSpec(1, 2), 7)):
            ids, lengths = hash_texts(texts, spec, buckets)
            want = [_reference(t, spec, buckets) for t in texts]
            assert lengths.tolist() == [len(w) for w in want]
            assert ids.tolist() == [i for w in want for i in w]


@pytest.mark.parametrize(
    ("text", "spec", "buckets", "count", "first", "digest"),
    [
        ("A wonderful film.", "w3c4", 2097152, 77, [11199, 17073, 67789], "22bced3b0b277169"),
        ("재밌다 👍 good<br />movie!", "w2c3", 4096, 58, [211, 216, 255], "7f495dec7e496321"),
        ("", "w3c4", 2097152, 2, [1171857, 1737112], "bd15d85c2314ef18"),
    ],
)
def test_hashing_is_pinned(
    text: str, spec: str, buckets: int, count: int, first: list[int], digest: str
) -> None:
    """The shipped heads were trained on these bucket ids: any change to the hash breaks them silently."""
    ids = features(text, NgramSpec.parse(spec), buckets)
    assert (len(ids), ids[:3], hashlib.sha256(str(ids).encode()).hexdigest()[:16]) == (count, first, digest)


def test_config_rejects_a_bad_head() -> None:
    with pytest.raises(ValueError, match="wWcC"):
        tiny_sentiment_config(100, ngram="w3", ngram_buckets=8)
    with pytest.raises(ValueError, match="ngram_buckets"):
        tiny_sentiment_config(100, ngram="w1c0")


def _wide(vocab_size: int, spec: str = "w2c3") -> SentimentClassifier:
    torch.manual_seed(0)
    model = SentimentClassifier(tiny_sentiment_config(vocab_size, ngram=spec, ngram_buckets=4096)).eval()
    assert model.ngram is not None
    torch.nn.init.normal_(model.ngram.table.weight, std=0.5)
    return model


def test_head_adds_its_logits_to_the_encoders(tiny_tokenizer_path: Path, tiny_vocab_size: int) -> None:
    model, tok = _wide(tiny_vocab_size), Tokenizer(tiny_tokenizer_path)
    texts = ["a good film .", "bad", "le chat dort sur le canapé ."]
    got = classify_texts(model, tok, texts)
    bare = model.encoder_only()
    assert bare.ngram is None
    for i, text in enumerate(texts):  # one at a time, by hand: softmax(encoder logits + head logits)
        ids = torch.tensor([classifier_ids(tok, text, model.cfg)])
        assert model.ngram is not None
        wide = model.ngram(*bags([text], NgramSpec(2, 3), 4096))
        want = (bare(ids) + wide).softmax(-1)[0]
        torch.testing.assert_close(got[i], want, atol=1e-5, rtol=0)
        torch.testing.assert_close(model.predict(ids, bags([text], NgramSpec(2, 3), 4096))[0], want)
    with pytest.raises(ValueError, match="needs the texts"):
        model(ids)  # the model's own output includes its head: no silent encoder-only answer
    assert not torch.allclose(classify_texts(bare, tok, texts), got)  # the head changes the answer
    ids = [classifier_ids(tok, t, model.cfg) for t in texts]
    with pytest.raises(ValueError, match="needs the text"):
        classify_ids(model, ids)  # a head without its inputs is an error, not a silent encoder-only answer
    compiled = classify_ids(model, ids, 2, compile_classifier(model), texts)
    torch.testing.assert_close(compiled, got, atol=1e-5, rtol=0)


@pytest.mark.parametrize("spec", ["w2c3", "w2c0"])
def test_batched_head_matches_one_text_at_a_time(
    tiny_tokenizer_path: Path, tiny_vocab_size: int, spec: str
) -> None:
    """In length buckets, eager and compiled, each text gets its own n-grams: blank texts (no n-gram at all
    with w2c0) first, last and in between, and batches cut into several buckets."""
    model, tok = _wide(tiny_vocab_size, spec), Tokenizer(tiny_tokenizer_path)
    rng = random.Random(0)
    words = ["good", "bad", "film", "le", "chat", "재밌다", "!", "not"]
    texts = ["", *(" ".join(rng.choices(words, k=rng.randint(0, 30))) for _ in range(40)), " "]
    ids = [classifier_ids(tok, t, model.cfg) for t in texts]
    alone = torch.cat([classify_ids(model, [i], 1, None, [t]) for i, t in zip(ids, texts, strict=True)])
    graph = compile_classifier(model)
    for batch_size in (1, 7, 64):
        torch.testing.assert_close(
            classify_ids(model, ids, batch_size, None, texts), alone, atol=1e-5, rtol=0
        )
        torch.testing.assert_close(
            classify_ids(model, ids, batch_size, graph, texts), alone, atol=1e-5, rtol=0
        )


def test_head_round_trips_through_a_checkpoint(
    tiny_tokenizer_path: Path, tiny_vocab_size: int, tmp_path: Path
) -> None:
    model, tok = _wide(tiny_vocab_size), Tokenizer(tiny_tokenizer_path)
    save_checkpoint(tmp_path / "wide", model, tiny_tokenizer_path, dtype=torch.float32)
    loaded = load_checkpoint(tmp_path / "wide")
    assert loaded.config.ngram == "w2c3"
    assert loaded.config.ngram_buckets == 4096
    texts = ["a good film .", "재밌다"]
    assert classify_ids(loaded.model, [], texts=[]).shape == (0, 2)  # type: ignore[arg-type]
    half = load_checkpoint(tmp_path / "wide", dtype=torch.bfloat16)
    assert half.model.ngram is not None
    assert half.model.ngram.table.weight.dtype == torch.float32
    torch.testing.assert_close(
        classify_texts(half.model, half.tokenizer, texts),  # type: ignore[arg-type]
        classify_texts(model, tok, texts),
        atol=0.05,
        rtol=0,
    )
    torch.testing.assert_close(
        classify_texts(loaded.model, loaded.tokenizer, texts),
        classify_texts(model, tok, texts),  # type: ignore[arg-type]
    )
    # the head-less view shares the encoder's tensors in their dtype (bf16 here, not copied into fp32)
    full = half.model
    assert isinstance(full, SentimentClassifier)
    assert full.ngram is not None
    bare = full.encoder_only()
    assert bare.ngram is None
    assert {p.dtype for p in bare.parameters()} == {torch.bfloat16}
    assert bare.embed.token.weight.data_ptr() == full.embed.token.weight.data_ptr()
    ids = torch.tensor([classifier_ids(tok, "a good film .", model.cfg)])
    ngrams = bags(["a good film ."], NgramSpec(2, 3), 4096)
    torch.testing.assert_close(bare.logits(ids) + full.ngram(*ngrams), full.logits(ids, ngrams))
