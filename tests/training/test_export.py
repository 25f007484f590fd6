"""CTranslate2 export: the converted shipped translator decodes exactly as ours (float32), and the CLI round trip."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch

from model import DecodeOptions, LoadedModel, Translator, load_checkpoint, save_checkpoint
from model.inference import translate_ids
from model.preprocess import source_ids
from tests.conftest import tiny_translation_config
from tests.margins import MARGIN, with_margin
from training.__main__ import main
from training.export import ctranslate2_options, export_ctranslate2, translate_ids_ctranslate2

ctranslate2 = pytest.importorskip("ctranslate2")

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "translate-fr-en"
FRENCH = [
    "Je ne sais pas où il est allé.",
    "Bonjour.",
    "Il fait très froid ce matin, alors je vais rester à la maison avec mes enfants.",
    "Je ne saurais en être certain.",  # our stopping rule and CTranslate2's early exit differ here (beam 4)
    "Je vais laver les plats.",  # idem
    "Où est la gare ?",
    "Elle lui a demandé de l'aider, mais il a refusé.",
    "Tom n'aime pas les chats.",
    "Nous avons mangé des pommes.",
    "Pourquoi ?",
    "Le livre que tu m'as prêté était passionnant, je l'ai lu en deux jours.",
    "Ça ne fait rien.",
]


@pytest.fixture(scope="module")
def shipped() -> LoadedModel:
    return load_checkpoint(SHIPPED)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> ctranslate2.Translator:
    out = export_ctranslate2(SHIPPED, tmp_path_factory.mktemp("ct2") / "translate-fr-en")
    return ctranslate2.Translator(str(out), compute_type="float32", intra_threads=1)


def _ours(loaded: LoadedModel, seqs: list[list[int]], opts: DecodeOptions, batch: int) -> list[list[int]]:
    assert isinstance(loaded.model, Translator)
    return [hyps[0].tokens for hyps in translate_ids(loaded.model, seqs, opts, None, batch)]


@pytest.mark.parametrize("beam_size", [1, 4])
@pytest.mark.parametrize("batch_size", [1, 5])
def test_export_decodes_the_same_tokens(
    shipped: LoadedModel, exported: ctranslate2.Translator, beam_size: int, batch_size: int
) -> None:
    seqs = [source_ids(shipped.tokenizer, t, shipped.config) for t in FRENCH]
    opts = DecodeOptions(beam_size=beam_size, length_penalty=0.0)
    ours = _ours(shipped, seqs, opts, batch_size)
    theirs = translate_ids_ctranslate2(
        exported, shipped.tokenizer, shipped.config, seqs, opts, None, batch_size
    )
    assert theirs == ours
    assert min(map(len, ours)) >= 2  # real translations, not a trivial match
    assert max(map(len, ours)) >= 15


def test_export_scores_like_teacher_forcing(shipped: LoadedModel, exported: ctranslate2.Translator) -> None:
    """Per-token log-probabilities of a forced target, and the banned tokens' -inf (here BOS)."""
    model, tok, cfg = shipped.model, shipped.tokenizer, shipped.config
    assert isinstance(model, Translator)
    src = source_ids(tok, FRENCH[0], cfg)
    target = tok.encode("I don't know where he went.") + [cfg.bos_id]
    with torch.no_grad():
        logits = model(torch.tensor([src]), torch.tensor([[cfg.bos_id, *target]]))[0].float()
    logits[:, model.banned] = float("-inf")
    ours = logits.log_softmax(-1).gather(1, torch.tensor(target + [cfg.eos_id])[:, None])[:, 0]
    res = exported.score_batch([tok.pieces(src[:-1])], [tok.pieces(target)], max_input_length=0)[0]
    theirs = torch.tensor(res.log_probs)
    assert theirs[-2] == ours[-2] == float("-inf")  # BOS is never emitted
    torch.testing.assert_close(theirs[:-2], ours[:-2], rtol=0, atol=1e-4)
    torch.testing.assert_close(theirs[-1], ours[-1], rtol=0, atol=1e-4)  # EOS after BOS


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"norm_first": False}, id="post-norm"),
        pytest.param(
            {"target_lang_ids": {"en": 4, "de": 5}, "target_langs": ("en", "de")}, id="multilingual"
        ),
    ],
)
def test_tiny_variants_decode_the_same_tokens(
    tmp_path: Path, tiny_tokenizer_path: Path, tiny_vocab_size: int, overrides: dict[str, object]
) -> None:
    """Untied random models (varied outputs) of the other layouts. They run to the length limit: greedy at
    batch 1 agrees even then (in a batch, CTranslate2 has one limit for all). Except a sentence whose greedy
    decode in torch has a step within MARGIN of a tie (tests/margins.py): the two engines' log-probabilities
    differ by rounding (up to 1.2e-5), so either token is right there. This asserted every sentence equal;
    the post-norm model's "mon ami voit" has a step whose best two log-probabilities are 6.1e-5 apart."""
    torch.manual_seed(0)
    cfg = tiny_translation_config(tiny_vocab_size, tie_embeddings=False, max_len=40, **overrides)
    save_checkpoint(tmp_path / "ckpt", Translator(cfg).eval(), tiny_tokenizer_path, dtype=torch.float32)
    loaded = load_checkpoint(tmp_path / "ckpt")
    translator = ctranslate2.Translator(str(export_ctranslate2(tmp_path / "ckpt", tmp_path / "ct2")))
    seqs = [source_ids(loaded.tokenizer, t, cfg) for t in ("le chat aime la musique", "elle", "mon ami voit")]
    opts = DecodeOptions(beam_size=1)
    for lang in cfg.target_langs:
        assert isinstance(loaded.model, Translator)
        ours = [h[0].tokens for h in translate_ids(loaded.model, seqs, opts, lang, 1)]
        theirs = translate_ids_ctranslate2(translator, loaded.tokenizer, cfg, seqs, opts, lang, 1)
        for seq, o, t in zip(seqs, ours, theirs, strict=True):
            if o != t:
                alone = partial(translate_ids, loaded.model, [seq], opts, lang, 1)
                _, margin = with_margin(alone)
                assert margin < MARGIN, (o, t, f"torch's choices were clear by >= {margin:.2g}")
        assert sum(o == t for o, t in zip(ours, theirs, strict=True)) >= len(seqs) - 1
        assert len({tuple(t) for t in ours}) == len(seqs)


def test_gnmt_length_penalty_has_no_ctranslate2_equivalent(shipped: LoadedModel) -> None:
    with pytest.raises(ValueError, match="length_penalty=0.6"):
        ctranslate2_options(DecodeOptions(beam_size=4, length_penalty=0.6), [5], shipped.config)
    greedy = ctranslate2_options(DecodeOptions(beam_size=1, length_penalty=0.6), [5], shipped.config)
    assert greedy["max_decoding_length"] == 19  # ceil(2 * 5 + 10) - 1: EOS is not counted


def test_cli_round_trip(
    tmp_path: Path, shipped: LoadedModel, tiny_sentiment_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fr-en"
    argv = ["export", "--format", "ctranslate2", "--checkpoint", str(SHIPPED), "--out", str(out)]
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.bin",
        "shared_vocabulary.json",
        "tokenizer.model",
    ]
    translator = ctranslate2.Translator(str(out))
    seqs = [source_ids(shipped.tokenizer, FRENCH[0], shipped.config)]
    opts = DecodeOptions(beam_size=4, length_penalty=0.0)
    got = translate_ids_ctranslate2(translator, shipped.tokenizer, shipped.config, seqs, opts)
    assert shipped.tokenizer.decode(got[0]) == "I don't know where he went."
    capsys.readouterr()

    assert main(argv) == 2
    assert "already exists (--force replaces it)" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0
    argv[4] = str(tiny_sentiment_checkpoint)
    assert main([*argv[:-1], str(tmp_path / "sentiment")]) == 2
    assert "only translators export to CTranslate2" in capsys.readouterr().err
    assert not (tmp_path / "sentiment").exists()


def test_evaluate_with_the_ctranslate2_engine_scores_as_torch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m training evaluate --engine ctranslate2` (the server's CTranslate2 decoding): the same
    translations as the torch engine at beam 4, length penalty 0.6 (re-ranked with our penalty)."""
    refs = ["I don't know where he went.", "Hello.", "It's very cold this morning."] + ["Why?"] * 9
    data = tmp_path / "test.tsv"
    data.write_text("en\tfr\n" + "".join(f"{e}\t{f}\n" for e, f in zip(refs, FRENCH, strict=True)))
    results = []
    for engine in ("torch", "ctranslate2"):
        argv = ["evaluate", "--checkpoint", str(SHIPPED), "--data", str(data), "--format", "tatoeba"]
        assert main([*argv, "--engine", engine]) == 0
        results.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    torch_res, ct2_res = results
    assert ct2_res["engine"] == "ctranslate2"
    assert torch_res["decoding"] == ct2_res["decoding"]
    assert torch_res["decoding"]["length_penalty"] == 0.6
    assert (ct2_res["bleu"], ct2_res["chrf"]) == (torch_res["bleu"], torch_res["chrf"])
    assert ct2_res["bleu"] > 10  # real translations


def test_evaluate_replace_unknowns_puts_numbers_back_in_both_engines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--replace-unknowns`: the shipped fr-en model's lost numbers and symbols come back, the same in both
    engines, and BLEU against references that hold them rises."""
    pairs = [
        (
            "The ticket costs 15 € and the train leaves at 19:30.",
            "Le billet coûte 15 € et le train part à 19:30.",
        ),
        ("I have 3 cats and 2 dogs.", "J'ai 3 chats et 2 chiens."),
        ("He was born on 12/03/1990 in Paris.", "Il est né le 12/03/1990 à Paris."),
    ]
    data = tmp_path / "test.tsv"
    data.write_text("en\tfr\n" + "".join(f"{e}\t{f}\n" for e, f in pairs))
    argv = ["evaluate", "--checkpoint", str(SHIPPED), "--data", str(data), "--format", "tatoeba"]
    results = {}
    for engine, flags in (
        ("torch", []),
        ("torch", ["--replace-unknowns"]),
        ("ctranslate2", ["--replace-unknowns"]),
    ):
        assert main([*argv, "--engine", engine, *flags]) == 0
        results[engine, bool(flags)] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    off, on, ct2 = results["torch", False], results["torch", True], results["ctranslate2", True]
    assert (off["replace_unknowns"], on["replace_unknowns"]) == (False, True)
    assert (ct2["bleu"], ct2["chrf"]) == (on["bleu"], on["chrf"])
    assert on["bleu"] > off["bleu"]


def test_evaluate_engine_is_for_translators(tiny_sentiment_checkpoint: Path, tmp_path: Path) -> None:
    data = tmp_path / "nsmc.txt"
    data.write_text("id\tdocument\tlabel\n1\t좋아요\t1\n")
    argv = [
        "evaluate",
        "--checkpoint",
        str(tiny_sentiment_checkpoint),
        "--data",
        str(data),
        "--format",
        "nsmc",
    ]
    with pytest.raises(SystemExit, match="--engine ctranslate2 decodes translators"):
        main([*argv, "--engine", "ctranslate2"])
