"""A hostile checkpoint beside good ones fails alone, in every process layout (issue 43, findings 1 and 2).

- A copy of the translator whose config.json says vocab_size 8001 while its tokenizer has fewer pieces:
  each HTTP process (APP_HTTP_WORKERS=2) loaded the tokenizers at start, died on it, and after 6 deaths the
  whole server exited.
- A copy whose config.json asks for 100,000 layers or 10,000,000 positions: the model was built before its
  shapes were compared with the weights (minutes and gigabytes), holding every inference worker.
Now each is refused before anything is built, named in /ready with its reason, and the rest serve.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
import torch

import model.checkpoint
from model.checkpoint import CheckpointError, load_checkpoint
from model.config import SIZE_LIMITS
from tests.app.test_parallel import Server, eventually, serve


def hostile_copy(good: Path, dst: Path, **model: object) -> Path:
    """`good` copied to `dst` with config.json's model section overridden by `model`."""
    shutil.copytree(good, dst)
    meta = json.loads((dst / "config.json").read_text())
    meta["model"].update(model)
    (dst / "config.json").write_text(json.dumps(meta))
    return dst


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"n_layers": 100_000}, f"n_layers=100000 is outside 1..{SIZE_LIMITS['n_layers']}"),
        ({"max_len": 10_000_000}, f"max_len=10000000 is outside 1..{SIZE_LIMITS['max_len']:,}"),
        ({"d_model": "32"}, "d_model must be int, got '32' (str)"),
        ({"vocab_size": 8001}, "config.json says vocab_size=8001"),
    ],
)
def test_a_hostile_config_is_refused_before_anything_is_built(
    tiny_translator_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    override: dict[str, object],
    message: str,
) -> None:
    bad = hostile_copy(tiny_translator_checkpoint, tmp_path / "bad", **override)

    def never(*_: object, **__: object) -> None:
        raise AssertionError("a model was built from a config that the checks refuse")

    monkeypatch.setattr(model.checkpoint, "build_model", never)
    start = time.monotonic()
    with pytest.raises(CheckpointError, match="invalid 'model' section|vocabulary of") as e:
        load_checkpoint(bad)
    assert message in str(e.value)
    assert time.monotonic() - start < 5


def test_shapes_are_compared_with_the_weights_before_the_model_is_built(
    tiny_translator_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sizes within the limits that disagree with the weights (more layers than the file holds): refused
    from a meta-device skeleton, before a parameter is allocated."""
    cfg = json.loads((tiny_translator_checkpoint / "config.json").read_text())["model"]
    bad = hostile_copy(tiny_translator_checkpoint, tmp_path / "bad", n_layers=cfg["n_layers"] + 6)
    built: list[str] = []  # the devices models were built on (the check's skeleton is on "meta")
    real = model.checkpoint.build_model

    def build(*args: object, **kwargs: object) -> object:
        built.append(torch.get_default_device().type)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(model.checkpoint, "build_model", build)
    with pytest.raises(CheckpointError, match="tensors do not match config.json: missing"):
        load_checkpoint(bad)
    assert built == ["meta"]


@pytest.fixture(scope="module")
def hostile_dir(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_sentiment_checkpoint: Path,
    tiny_translator_checkpoint: Path,
) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    (root / "sentiment-en").symlink_to(tiny_sentiment_checkpoint, target_is_directory=True)
    (root / "translate-fr-en").symlink_to(tiny_translator_checkpoint, target_is_directory=True)
    hostile_copy(tiny_translator_checkpoint, root / "translate-fr-en-vocab", vocab_size=8001)
    hostile_copy(tiny_translator_checkpoint, root / "translate-fr-en-layers", n_layers=100_000)
    return root


FAILED = {
    "translate-fr-en-vocab": "config.json says vocab_size=8001",
    "translate-fr-en-layers": "n_layers=100000",
}


def serves_the_rest(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        ready = client.get("/ready").json()
        for name, reason in FAILED.items():
            assert reason in ready["failed"][name]
        # /models lists what was discovered: the vocabulary copy (the layers copy fails at discovery)
        models = {m["name"]: m for m in client.get("/models").json()["models"]}
        assert models["translate-fr-en-vocab"]["status"] == "failed"
        assert FAILED["translate-fr-en-vocab"] in models["translate-fr-en-vocab"]["reason"]
        for _ in range(8):  # requests spread over both HTTP processes
            r = client.post("/sentiment", json={"text": "great"})
            assert r.status_code == 200, r.text
            r = client.post(
                "/translate", json={"text": "le chat", "source_lang": "fr", "model": "translate-fr-en"}
            )
            assert r.status_code == 200, r.text
            r = client.post(
                "/translate", json={"text": "le chat", "source_lang": "fr", "model": "translate-fr-en-vocab"}
            )
            assert r.status_code == 503
            assert r.json()["detail"].startswith("model translate-fr-en-vocab failed to load: ")
            assert FAILED["translate-fr-en-vocab"] in r.json()["detail"]
    assert server.proc.poll() is None


# the process layer is what these test, not TorchScript: eager, so that no model process traces at start
EAGER = {"APP_HTTP_WORKERS": "2", "APP_TORCHSCRIPT": "false"}


@pytest.mark.slow
@pytest.mark.parametrize("model_processes", ["1", "2"])
def test_hostile_checkpoints_fail_alone_in_every_layout(hostile_dir: Path, model_processes: str) -> None:
    """APP_STRICT_READINESS=false: ready (200) with both named as failed in /ready and /models; the rest
    serve from every HTTP process, and the hostile model's own requests answer 503 saying why."""
    env = EAGER | {"APP_STRICT_READINESS": "false", "APP_MODEL_PROCESSES": model_processes}
    with serve(hostile_dir, **env) as server:  # waits for /ready 200 (or the server's exit: a failure)
        ready = httpx.get(f"{server.url}/ready", timeout=5).json()
        assert ready["failed"].keys() == FAILED.keys()
        serves_the_rest(server)


@pytest.mark.slow
def test_strict_readiness_names_each_hostile_checkpoint(hostile_dir: Path) -> None:
    """APP_STRICT_READINESS=true (the default): /ready 503 naming both and why, while the others serve."""
    with serve(hostile_dir, ready=False, **EAGER) as server:

        def settled() -> dict | None:
            try:
                body = httpx.get(f"{server.url}/ready", timeout=5).json()
            except httpx.TransportError:
                return None
            states = body.get("models", {})
            return body if states and all(v in ("ready", "failed") for v in states.values()) else None

        body = eventually(settled, timeout=60)
        assert server.proc.poll() is None
        assert body["status"] == "failed"
        assert {n for n, v in body["models"].items() if v == "failed"} == FAILED.keys()
        for name, reason in FAILED.items():
            assert reason in body["failed"][name]
        serves_the_rest(server)


def _param_bytes(checkpoint: Path) -> int:
    from model.checkpoint import expected_shapes
    from model.config import ModelConfig

    cfg = ModelConfig.from_dict(json.loads((checkpoint / "config.json").read_text())["model"])
    return sum(s.numel() for s in expected_shapes(cfg).values()) * 4  # float32


def test_a_model_over_the_memory_budget_is_refused_before_its_weights_are_read(
    tiny_translator_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need = _param_bytes(tiny_translator_checkpoint)

    def never(*_: object, **__: object) -> None:
        raise AssertionError("a weights file was read for a model over the budget")

    with monkeypatch.context() as m:
        m.setattr(model.checkpoint, "_read", never)
        with pytest.raises(
            model.checkpoint.OverBudget, match=f"over the budget of {need - 1:,} bytes per model"
        ):
            load_checkpoint(tiny_translator_checkpoint, max_bytes=need - 1)
    assert load_checkpoint(tiny_translator_checkpoint, max_bytes=2 * need).config.n_layers >= 1


async def translator_failed_alone(settings: object, reason: str) -> None:
    """Served with `settings` (two_models_dir): sentiment-en answers, translate-fr-en 503 saying `reason`."""
    from tests.app.conftest import serve as serve_app

    async with serve_app(settings) as (_, client):
        r = await client.post("/sentiment", json={"text": "great"})
        assert r.status_code == 200, r.text
        body = {"text": "le chat", "source_lang": "fr", "model": "translate-fr-en"}
        r = await client.post("/translate", json=body)
        assert r.status_code == 503
        assert reason in r.json()["detail"]


@pytest.mark.anyio
async def test_a_model_over_apps_budget_fails_alone(two_models_dir: Path) -> None:
    """APP_MAX_MODEL_BYTES between the classifier's size and the translator's: the translator fails, saying
    the budget and the setting; the classifier serves."""
    from app.core.settings import Settings

    small, large = (_param_bytes(two_models_dir / n) for n in ("sentiment-en", "translate-fr-en"))
    assert small < large
    budget = (small + large) // 2
    settings = Settings(checkpoint_dir=two_models_dir, max_model_bytes=budget, strict_readiness=False)
    await translator_failed_alone(
        settings, f"over the budget of {budget:,} bytes per model (APP_MAX_MODEL_BYTES)"
    )


@pytest.mark.anyio
async def test_a_model_past_its_load_budget_fails_alone(
    two_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """APP_MODEL_LOAD_TIMEOUT_S: a load that outlasts it (here held on an event) fails that model, saying so;
    the other is ready and serves meanwhile, not after the stuck load (loads never hold an inference worker)."""
    import threading

    from app.core.settings import Settings
    from app.registry import ModelEntry, Registry

    release = threading.Event()
    real = Registry.load

    def stuck(self: Registry, entry: ModelEntry) -> object:
        if entry.name == "translate-fr-en":
            release.wait(30)  # a load that never ends, until the test is done
        return real(self, entry)

    monkeypatch.setattr(Registry, "load", stuck)
    settings = Settings(
        checkpoint_dir=two_models_dir,
        model_load_timeout_s=3.0,
        strict_readiness=False,
        torchscript=False,
        warmup=False,
    )
    try:
        await translator_failed_alone(settings, "did not load within 3 s (APP_MODEL_LOAD_TIMEOUT_S)")
    finally:
        release.set()
