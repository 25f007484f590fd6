"""APP_TRANSLATION_ENGINE=ctranslate2: /translate answers exactly as the torch engine does (float32), through
the same batchers; /attention stays on torch; settings that cannot run fail at start-up."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from asgi_lifespan import LifespanManager

from app.core.settings import Settings, SettingsError
from app.main import create_app
from app.tasks.ctranslate2 import CT2TranslationHandler
from model import Translator, save_checkpoint
from tests.app.conftest import serve
from tests.conftest import tiny_translation_config
from tests.margins import assert_same_answer

ctranslate2 = pytest.importorskip("ctranslate2")
pytestmark = pytest.mark.anyio

FR = "Le chat aime la maison. Un chien voit un livre !\nMon ami lit."
ES = ["le chat aime la musique", "elle", "mon ami voit un livre aujourd'hui. Ce film est lent.", "un chien"]


@pytest.fixture(scope="module")
def engine_checkpoint_dir(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_translator_checkpoint: Path,
    multi_translator_checkpoint: Path,
    tiny_tokenizer_path: Path,
    tiny_vocab_size: int,
) -> Path:
    """The shared random translators (their outputs run to the length limit), `translate-ends`: es ->
    en/fr with target-language start tags, its EOS output row scaled so that most outputs end early, at
    varied lengths (beam search then finishes hypotheses along the way, as trained models do), and
    `translate-unk` (it -> en/fr, the same but writing <unk>s)."""
    root = tmp_path_factory.mktemp("engine-checkpoints")
    for ckpt in (tiny_translator_checkpoint, multi_translator_checkpoint):
        (root / ckpt.name).symlink_to(ckpt, target_is_directory=True)
    torch.manual_seed(1)
    cfg = tiny_translation_config(
        tiny_vocab_size,
        source_langs=("es",),
        target_langs=("en", "fr"),
        target_lang_ids={"en": 4, "fr": 5},
        tie_embeddings=False,
    )
    model = Translator(cfg).eval()
    with torch.no_grad():
        model.generator.weight[cfg.eos_id] *= 6.0
    save_checkpoint(root / "translate-ends", model, tiny_tokenizer_path, dtype=torch.float32)
    # `translate-unk`: it -> en/fr, its <unk> output row scaled up, so that its outputs hold <unk>s
    torch.manual_seed(2)
    model = Translator(dataclasses.replace(cfg, source_langs=("it",))).eval()
    with torch.no_grad():
        model.generator.weight[cfg.eos_id] *= 4.0
        model.generator.weight[cfg.unk_id] *= 5.0
    save_checkpoint(root / "translate-unk", model, tiny_tokenizer_path, dtype=torch.float32)
    return root


@pytest.fixture(scope="module")
async def torch_client(engine_checkpoint_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(Settings(checkpoint_dir=engine_checkpoint_dir, translation_engine="torch")) as (
        _,
        client,
    ):
        yield client


@pytest.fixture(scope="module")
async def ct2_server(engine_checkpoint_dir: Path) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    settings = Settings(checkpoint_dir=engine_checkpoint_dir, translation_engine="ctranslate2")
    async with serve(settings) as pair:
        yield pair


def _handler(app: Any, name: str) -> CT2TranslationHandler:
    handler = app.state.service.tasks["translation"].handlers[name]
    assert isinstance(handler, CT2TranslationHandler)
    return handler


TEXTS = {"fr": {"text": FR}, "es": {"texts": ES}, "de": {"texts": ["Hallo.", "Der Hund."]}}


def case(case_id: str, source_lang: str, beam_size: int, **options: Any) -> Any:
    """A /translate body with scores, of source_lang's texts (TEXTS), as a pytest param named case_id."""
    body = TEXTS[source_lang] | {"source_lang": source_lang, "beam_size": beam_size, "return_scores": True}
    return pytest.param(body | options, id=case_id)


BODIES = [
    case("greedy", "fr", 1),
    case("greedy-texts-en", "es", 1),
    case("greedy-texts-fr", "es", 1, target_lang="fr"),
    case("beam4-lp0", "es", 4, length_penalty=0),
    case("beam4-nbest3", "es", 4, length_penalty=0, num_hypotheses=3),
    case("beam4-nbest3-fr", "es", 4, target_lang="fr", length_penalty=0, num_hypotheses=3),
    case("beam3-max_length3", "es", 3, length_penalty=0, max_length=3, num_hypotheses=2),
    case("greedy-max_length4", "fr", 1, max_length=4),
    case("beam4-at-the-limit", "fr", 4, length_penalty=0, num_hypotheses=3),
    case("greedy-multilingual-at-the-limit", "de", 1, target_lang="fr"),
    case("greedy-multilingual-max_length1", "de", 1, max_length=1),
]


@pytest.mark.parametrize("body", BODIES)
async def test_ctranslate2_answers_as_torch(
    torch_client: httpx.AsyncClient, ct2_server: tuple[Any, httpx.AsyncClient], body: dict[str, Any]
) -> None:
    want = await torch_client.post("/translate", json=body)
    got = await ct2_server[1].post("/translate", json=body)
    assert want.status_code == got.status_code == 200, (want.text, got.text)
    await assert_same_answer(got.json(), want.json(), torch_client, body)


async def test_ctranslate2_decodes_what_ends_before_the_limit(
    ct2_server: tuple[Any, httpx.AsyncClient],
) -> None:
    """The torch decoder redoes only beam searches that reach their limit: not the sentences of
    translate-ends (all but one end early), never a greedy one (its limit is kept in CTranslate2)."""
    app, client = ct2_server
    engine = _handler(app, "translate-ends").engine
    before = engine.redone
    for beam in (1, 4):
        body = {"texts": ES, "source_lang": "es", "beam_size": beam, "length_penalty": 0}
        assert (await client.post("/translate", json=body)).status_code == 200
        if beam == 1:
            assert engine.redone == before
    sentences = len(ES) + 1
    assert engine.redone - before < sentences / 2
    tiny = _handler(app, "translate-fr-en").engine
    before = tiny.redone
    r = await client.post("/translate", json={"text": FR, "source_lang": "fr", "beam_size": 1})
    assert r.status_code == 200
    assert tiny.redone == before  # greedy at the limit: cut and scored in CTranslate2


async def test_concurrent_requests_are_batched_and_answered_as_torch(
    torch_client: httpx.AsyncClient,
    ct2_server: tuple[Any, httpx.AsyncClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, client = ct2_server
    handler = _handler(app, "translate-ends")
    sizes: list[int] = []
    decode = handler.engine.translate_ids

    def recording(seqs: list[list[int]], *args: Any, **kwargs: Any) -> Any:
        sizes.append(len(seqs))
        return decode(seqs, *args, **kwargs)

    monkeypatch.setattr(handler.engine, "translate_ids", recording)
    bodies = [
        {"text": t, "source_lang": "es", "beam_size": b, "length_penalty": 0, "return_scores": True}
        for t in ES * 4
        for b in (1, 4)
    ]
    wants = [(await torch_client.post("/translate", json=b)).json() for b in bodies]
    answers = await asyncio.gather(*(client.post("/translate", json=b) for b in bodies))
    for r, want, body in zip(answers, wants, bodies, strict=True):
        assert r.status_code == 200, r.text
        await assert_same_answer(r.json(), want, torch_client, body)
    assert max(sizes) > 1, sizes  # several requests' sentences decoded in one CTranslate2 call


async def test_attention_stays_on_torch(
    torch_client: httpx.AsyncClient, ct2_server: tuple[Any, httpx.AsyncClient]
) -> None:
    body = {"text": "le chat aime la musique", "model": "translate-ends", "target_lang": "fr"}
    want = await torch_client.post("/attention", json=body)
    got = await ct2_server[1].post("/attention", json=body)
    assert want.status_code == got.status_code == 200, got.text
    assert got.json() == want.json()  # the greedy translation comes from CTranslate2, the maps from torch


def test_two_workers_decode_side_by_side_without_the_gil(engine_checkpoint_dir: Path) -> None:
    """One translator, inter_threads=2 (as with 2 inference workers): two calls run at once, and a Python
    thread keeps running while they do (translate_batch releases the GIL)."""
    from engines.ct2_decode import load_ct2_decoder
    from model import load_checkpoint

    loaded = load_checkpoint(engine_checkpoint_dir / "translate-fr-en")
    settings = Settings(
        checkpoint_dir=engine_checkpoint_dir, translation_engine="ctranslate2", inference_workers=2
    )
    kwargs = settings.ctranslate2_kwargs(torch.device("cpu"), torch.float32)
    assert kwargs is not None
    assert kwargs["inter_threads"] == 2
    translator = load_ct2_decoder(loaded, **kwargs).translator
    source = [loaded.tokenizer.pieces(loaded.tokenizer.encode(FR))] * 32  # runs to 200 tokens, beam 4
    start, done = threading.Barrier(3), threading.Event()
    active, spins = [0], [0]

    def translate() -> None:
        start.wait()
        translator.translate_batch(source, beam_size=4, max_decoding_length=200, min_decoding_length=200)

    def watch() -> None:
        start.wait()
        while not done.is_set():
            active[0] = max(active[0], translator.num_active_batches)
            spins[0] += 1

    threads = [threading.Thread(target=translate) for _ in range(2)]
    watcher = threading.Thread(target=watch)
    for t in [*threads, watcher]:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert active[0] == 2
    assert spins[0] > 1000  # the watcher ran while both translations did


class Recording:
    """A translator's stand-in that delegates, counting the batches it translated."""

    def __init__(self, translator: Any) -> None:
        self.translator, self.batches = translator, 0

    def translate_batch(self, *args: Any, **kwargs: Any) -> Any:
        self.batches += 1
        return self.translator.translate_batch(*args, **kwargs)

    def score_batch(self, *args: Any, **kwargs: Any) -> Any:
        return self.translator.score_batch(*args, **kwargs)


def test_a_lone_call_decodes_on_every_thread_and_answers_the_same(engine_checkpoint_dir: Path) -> None:
    """lone_threads above intra_threads: a second translator of one replica on them; a call made while no
    other runs decodes there, one made while another runs on the replicas; the answers are the same."""
    from engines.ct2_decode import load_ct2_decoder
    from model import DecodeOptions, load_checkpoint

    loaded = load_checkpoint(engine_checkpoint_dir / "translate-ends")
    decoder = load_ct2_decoder(loaded, inter_threads=2, intra_threads=1, lone_threads=2)
    assert decoder.lone is not None
    assert (decoder.lone.num_translators, decoder.translator.num_translators) == (1, 2)  # replicas
    assert load_ct2_decoder(loaded, inter_threads=1, intra_threads=2, lone_threads=2).lone is None
    lone, bulk = Recording(decoder.lone), Recording(decoder.translator)
    decoder.lone, decoder.translator = lone, bulk  # type: ignore[assignment]
    seqs = [loaded.tokenizer.encode(t, add_eos=True) for t in ES]
    options = DecodeOptions(beam_size=4, num_hypotheses=2)
    alone = decoder.translate_ids(seqs, options, "en")
    assert (lone.batches, bulk.batches) == (1, 0)
    decoder._calls = 1  # another call runs
    beside = decoder.translate_ids(seqs, options, "en")
    assert (lone.batches, bulk.batches) == (1, 1)
    assert [[h.tokens for h in n] for n in alone] == [[h.tokens for h in n] for n in beside]
    scores = [
        (a.score, b.score) for x, y in zip(alone, beside, strict=True) for a, b in zip(x, y, strict=True)
    ]
    assert max(abs(a - b) for a, b in scores) < 1e-4  # other threads: other float sums, the same search


def test_settings_map_device_dtype_and_quantize(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings(translation_engine="ctranslate2", quantize="int8", inference_workers=2, torch_threads=1)
    kwargs = s.ctranslate2_kwargs(torch.device("cpu"), torch.float32)
    assert kwargs == {
        "device": "cpu", "device_index": 0, "compute_type": "int8", "inter_threads": 2, "intra_threads": 1,
        "lone_threads": 2,
    }  # fmt: skip
    torch_engine = Settings(translation_engine="torch")
    assert torch_engine.ctranslate2_kwargs(torch.device("cpu"), torch.float32) is None
    # on a GPU (simulated: which compute types a device runs is CTranslate2's answer)
    monkeypatch.setattr(ctranslate2, "get_supported_compute_types", lambda *_: {"float32", "float16"})
    s = Settings(translation_engine="ctranslate2", inference_workers=1, torch_threads=4)
    kwargs = s.ctranslate2_kwargs(torch.device("cuda", 1), torch.float16)
    assert kwargs is not None
    assert (kwargs["device"], kwargs["device_index"], kwargs["compute_type"]) == ("cuda", 1, "float16")
    assert kwargs["lone_threads"] == 0  # a GPU: one translator
    with pytest.raises(
        SettingsError, match="APP_DTYPE=bfloat16: CTranslate2 runs float16, float32 on this cuda"
    ):
        s.ctranslate2_kwargs(torch.device("cuda"), torch.bfloat16)


async def test_a_compute_type_ctranslate2_cannot_run_fails_start_up(engine_checkpoint_dir: Path) -> None:
    if "float16" in ctranslate2.get_supported_compute_types("cpu"):
        pytest.skip("this CPU runs float16 in CTranslate2")
    settings = Settings(
        checkpoint_dir=engine_checkpoint_dir, translation_engine="ctranslate2", dtype="float16"
    )
    with pytest.raises(SettingsError, match="APP_TRANSLATION_ENGINE=ctranslate2 with APP_DTYPE=float16"):
        async with LifespanManager(create_app(settings)):
            pass


async def test_the_engine_without_the_package_names_the_install(
    engine_checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec: Callable[..., Any] = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ctranslate2" else find_spec(name, *a)
    )
    settings = Settings(checkpoint_dir=engine_checkpoint_dir, translation_engine="ctranslate2")
    with pytest.raises(SettingsError, match=r"not installed \(pip install ctranslate2, or the extra"):
        async with LifespanManager(create_app(settings)):
            pass


def test_auto_decodes_with_ctranslate2_where_it_answers_as_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default, auto: CTranslate2 on a CPU in float32 (torch's answers, faster: BENCHMARKS.md); torch
    where CTranslate2 would round otherwise (int8, bfloat16), on CUDA (not measured there yet) and without
    the package; auto never fails start-up."""
    auto = Settings(inference_workers=2, torch_threads=1)
    assert auto.translation_engine == "auto"
    assert auto.ctranslate2_kwargs(torch.device("cpu"), torch.float32) == {
        "device": "cpu", "device_index": 0, "compute_type": "float32", "inter_threads": 2, "intra_threads": 1,
        "lone_threads": 2,
    }  # fmt: skip
    assert Settings(device="cpu").openmp_env() == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}
    assert Settings(translation_engine="torch").openmp_env() == {}
    assert auto.ctranslate2_kwargs(torch.device("cpu"), torch.bfloat16) is None
    assert auto.ctranslate2_kwargs(torch.device("cuda"), torch.float32) is None
    assert Settings(quantize="int8").ctranslate2_kwargs(torch.device("cpu"), torch.float32) is None
    find_spec: Callable[..., Any] = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ctranslate2" else find_spec(name, *a)
    )
    assert auto.ctranslate2_kwargs(torch.device("cpu"), torch.float32) is None


async def test_auto_decodes_a_model_ctranslate2_cannot_take_with_torch(
    engine_checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversion that fails under auto leaves that model to the torch engine (the same answers), where
    APP_TRANSLATION_ENGINE=ctranslate2 fails the model."""
    import app.tasks.ctranslate2 as ct2_task

    def refuse(*_: Any, **__: Any) -> Any:
        raise ValueError("no such layout")

    monkeypatch.setattr(ct2_task, "load_ct2_decoder", refuse)
    async with serve(Settings(checkpoint_dir=engine_checkpoint_dir, warmup=False)) as (app, client):
        handler = app.state.service.tasks["translation"].handlers["translate-ends"]
        assert not isinstance(handler, CT2TranslationHandler)
        r = await client.post("/translate", json={"text": ES[0], "source_lang": "es"})
        assert r.status_code == 200, r.text


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="translation_engine"):
        Settings(translation_engine="onnx")  # type: ignore[arg-type]


IT = [  # digits, symbols and emoji: <unk>s for the tiny tokenizer
    "le chat 12 aime la musique 2025 .",
    "un chien 15 € voit un livre 😀 aujourd'hui 19:30",
    "mon ami lit 50 % et 7 & 8 https://x.org/a?b=1",
    "elle 😀😀",
    "le chat aime la maison",
]


@pytest.mark.parametrize(
    "body",
    [
        {"beam_size": 1},
        {"beam_size": 4, "num_hypotheses": 3},
        {"beam_size": 4, "target_lang": "fr"},
        {"beam_size": 3, "length_penalty": 0},
        {"beam_size": 4, "replace_unknowns": False},
    ],
    ids=["greedy", "beam4-nbest3", "beam4-fr", "beam3-lp0", "off"],
)
async def test_unknowns_are_replaced_as_torch_replaces_them(
    torch_client: httpx.AsyncClient, ct2_server: tuple[Any, httpx.AsyncClient], body: dict[str, Any]
) -> None:
    """The same texts from both engines with <unk>s replaced (CTranslate2's attention read as torch's); the
    outputs do hold <unk>s (off: ⁇), and on, every number and symbol of the sources comes back."""
    body = {"texts": IT, "source_lang": "it", "return_scores": True} | body
    want = await torch_client.post("/translate", json=body)
    got = await ct2_server[1].post("/translate", json=body)
    assert want.status_code == got.status_code == 200, (want.text, got.text)
    await assert_same_answer(got.json(), want.json(), torch_client, body)
    texts = [r["translation"] for r in want.json()["results"]]
    if body.get("replace_unknowns", True):
        assert not any("\u2047" in t for t in texts[:4])
        for item, text in zip(["12", "15 €", "50 %", "😀😀"], texts, strict=False):
            assert item in text
    else:
        assert any("\u2047" in t for t in texts)


def test_without_a_torch_model_unaligned_unknowns_keep_no_alignment(engine_checkpoint_dir: Path) -> None:
    """fallback None (an Argos package): the hypotheses CTranslate2 decodes without attention (beam searches
    cut at their length limit) keep no alignment, their <unk>s as decoded, where a torch model would align
    them."""
    from engines.ct2_decode import CT2Decoder, load_ct2_decoder
    from model import DecodeOptions, load_checkpoint
    from model.preprocess import source_ids

    loaded = load_checkpoint(engine_checkpoint_dir / "translate-unk")
    engine = CT2Decoder(load_ct2_decoder(loaded).translator, loaded.tokenizer, loaded.config, None)
    seqs = [source_ids(loaded.tokenizer, text, loaded.config) for text in IT]
    opts = DecodeOptions(beam_size=3, max_length=6, num_hypotheses=2)  # every search reaches its limit
    hyps = engine.translate_ids(seqs, opts, "en", align_unknowns=[True] * len(seqs))
    unk = loaded.config.unk_id
    assert any(unk in h.tokens for hs in hyps for h in hs)  # there were <unk>s to align
    assert all(h.alignment is None and len(h.tokens) <= 6 for hs in hyps for h in hs)
