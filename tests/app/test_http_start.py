"""An HTTP process's start-up (app/parallel/remote.py `_load_local`) is text work only: the routing registry,
the language detector and the tokenizers, without torch (whose import cost each HTTP process about 1.6 s of
CPU, and on CUDA a driver start: BENCHMARKS.md, "Ready")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from app.core.settings import REPO_ROOT
from bench.server import server_env
from model.checkpoint import load_checkpoint
from model.preprocess import classifier_ids, source_ids

# what app.parallel.http's main() imports and then runs before it connects, and a request's text work
HTTP_START = """
import json, sys
import app.parallel.http
from app.core.metrics import Metrics
from app.core.settings import load_settings
from app.parallel.remote import RemoteService
from app.tasks.translation_routes import translation_routes
service = RemoteService(load_settings(), Metrics(), "unused.sock")
service._load_local()
sentiment = service.tasks["sentiment"].handlers["sentiment-en"]
translation = service.tasks["translation"].handlers["translate-fr-en"]
print(json.dumps({
    "torch": sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")),
    "routes": translation_routes(service.settings, service.registry).table(),
    "detected": service.detector.detect("le chat dort sur le canapé")[0].language,
    "ids": sentiment.tokenize("a good film")[0],
    "sentences": [s.ids for s in translation.sentences([[["Le chat dort."]]], "texts", 1)[0]],
}))
"""


def run(code: str, checkpoint_dir: Path) -> dict:
    env = server_env({"APP_CHECKPOINT_DIR": str(checkpoint_dir), "APP_LOG_LEVEL": "warning"})
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_an_http_process_starts_and_tokenizes_without_torch(app_checkpoint_dir: Path) -> None:
    got = run(HTTP_START, app_checkpoint_dir)
    assert got["torch"] == []
    assert got["routes"]["fr-en"] == "translate-fr-en"
    assert got["detected"] == "fr"
    en = load_checkpoint(app_checkpoint_dir / "sentiment-en")  # as the model process loads them
    fr = load_checkpoint(app_checkpoint_dir / "translate-fr-en")
    assert got["ids"] == classifier_ids(en.tokenizer, "a good film", en.config)
    assert got["sentences"] == [source_ids(fr.tokenizer, "Le chat dort.", fr.config)]
