"""This service side by side with LibreTranslate itself, on the same fr-en weights: throughput and latency at
1, 16 and 64 closed-loop connections (bench/blast.py), and how many answers are identical.

    python -m bench.vs_libretranslate --libretranslate-python /tmp/ltvenv/bin/python [--duration 20]
        [--connections 1,16,64] [--sentences 500] [--answers 200] [--checkpoint checkpoints/translate-fr-en]
        [--lt-env ARGOS_INTRA_THREADS=1 ...]

LibreTranslate (1.9.6: pip install libretranslate==1.9.6 in a venv of its own; --libretranslate-python takes
that venv's python or its `libretranslate` executable; the bench skips, saying so, without one) serves the
checkpoint as an Argos package: the CTranslate2 export (`python -m training export --format ctranslate2`),
its sentencepiece model and a metadata.json, found through ARGOS_PACKAGES_DIR. It runs through
bench/lt_launcher.py: a rule sentence split (a break after .!?… and whitespace) instead of MiniSBD, which
downloads a model at run time, and no package install or update at start. Otherwise its defaults (--lt-env
sets ARGOS_* variables): 4 waitress threads, no rate limits, its INFO log, CTranslate2 with beam 4, length
penalty 0.2, inter_threads 1 and intra_threads 0 (CTranslate2's default count of OpenMP threads; on a busy
machine they stall for seconds, ARGOS_INTRA_THREADS=1 does not). This service runs with its defaults (a row
labelled with the engine GET /models reports), then with each other engine.

Both get the same JSON bodies {"q", "source": "fr", "target": "en", "format": "text"}: distinct French
sentences of the Tatoeba test split, round-robin (LibreTranslate keeps the previous text's translation: a
repeated text would be free). Each server runs alone: its answers first (the first --answers sentences, one
at a time, which warms it up), then one load per connection count. Ratio: req/s over LibreTranslate's at
the same connections.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx

from bench.blast import Load, blast, requests
from bench.server import REPO, free_port, serve, server_env
from engines.argos import METADATA, MODEL_DIR, SENTENCEPIECE, read_argos_package
from training.data import load_split

LAUNCHER = Path(__file__).resolve().parent / "lt_launcher.py"
ENGINES = ("torch", "ctranslate2")
Row = tuple[str, list[str], list[Load]]  # label, answers, one load per connection count
TARGET = {"1": 1.0, "64": 5.0, "identical": 0.95}  # issue 46: ours vs LibreTranslate's req/s; answers


def sentences(n: int) -> list[str]:
    """n distinct French sentences of the Tatoeba fr-en test split, spread over it (it runs short to long)."""
    rows = list(dict.fromkeys(p.src.strip() for p in load_split("tatoeba-fr-en", "test")))  # type: ignore[union-attr]
    rows = [r for r in rows if r]
    if len(rows) < n:
        raise SystemExit(f"the test split has {len(rows)} distinct sentences, fewer than --sentences {n}")
    step = len(rows) / n
    return [rows[int(i * step)] for i in range(n)]


def lt_python(given: str | None) -> tuple[str | None, str]:
    """(LibreTranslate's python, "") or (None, why not): `given` is a python or a `libretranslate` script."""
    path = shutil.which(given) if given else None
    if path is None:
        return None, f"no LibreTranslate at {given!r}" if given else "no --libretranslate-python given"
    python = path
    if not Path(path).name.startswith("python"):  # a console script: its shebang names the python
        first = Path(path).read_bytes()[:256].split(b"\n")[0]
        python = first[2:].decode().strip() if first.startswith(b"#!") else ""
    check = subprocess.run([python, "-c", "import libretranslate.main"], capture_output=True, text=True)
    if check.returncode != 0:
        return None, f"{python} cannot import libretranslate: {check.stderr.strip().splitlines()[-1:]}"
    return python, ""


def build_argos_package(checkpoint: Path, out: Path) -> Path:
    """The checkpoint as an installed Argos package directory `out` (model/, sentencepiece.model,
    metadata.json), checked by engines/argos.py's reader."""
    from engines.ct2_convert import export_ctranslate2

    export_ctranslate2(checkpoint, out / MODEL_DIR)
    shutil.copyfile(checkpoint / "tokenizer.model", out / SENTENCEPIECE)
    metadata = {
        "package_version": "1.0",
        "argos_version": "1.9",
        "from_code": "fr",
        "from_name": "French",
        "to_code": "en",
        "to_name": "English",
        "type": "translate",
        "code": f"translate-{checkpoint.name}",
    }
    (out / METADATA).write_text(json.dumps(metadata, indent=2))
    read_argos_package(out)
    return out


@contextmanager
def serve_libretranslate(
    python: str, packages: Path, work: Path, log: IO[bytes], extra: dict[str, str]
) -> Iterator[str]:
    """LibreTranslate through bench/lt_launcher.py on a free port -> its base url; SIGTERM at exit."""
    port = free_port()
    xdg = {k: str(work / "xdg") for k in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env = server_env(xdg | {"ARGOS_PACKAGES_DIR": str(packages), "ARGOS_DEVICE_TYPE": "cpu"} | extra)
    args = ["--host", "127.0.0.1", "--port", str(port), "--load-only", "fr,en"]
    args += ["--disable-web-ui", "--disable-files-translation"]
    proc = subprocess.Popen([python, str(LAUNCHER), *args], env=env, cwd=work, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _answers(f"{url}/languages"):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"LibreTranslate did not start:\n{log.read().decode(errors='replace')}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def words_of(text: str) -> list[str]:
    """Lower-case runs of letters and digits: an answer without its case and punctuation."""
    return re.findall(r"\w+", text.lower())


def body(text: str) -> dict[str, str]:
    return {"q": text, "source": "fr", "target": "en", "format": "text"}


def translate_each(url: str, texts: list[str]) -> list[str]:
    """Each text's translatedText, one request at a time."""
    with httpx.Client(timeout=60) as client:
        out = []
        for t in texts:
            r = client.post(url, json=body(t))
            r.raise_for_status()
            out.append(r.json()["translatedText"])
    return out


def measure(url: str, texts: list[str], args: argparse.Namespace) -> list[Load]:
    """One closed-loop load per connection count, the texts round-robin."""
    reqs = requests(url, [body(t) for t in texts])
    return [blast([url], [reqs], c, args.duration, args.clients) for c in args.connections]


def engine_of(url: str) -> str:
    """The engine GET /models reports for the translator."""
    models = httpx.get(f"{url}/models", timeout=10).json()["models"]
    return next(str(m.get("engine", "?")) for m in models if m.get("task") == "translation")


def run_ours(
    checkpoints: Path, env: dict[str, str], texts: list[str], answered: list[str], args: argparse.Namespace
) -> Row:
    """This service with `env` over its defaults: its label (the engine it reports), answers and loads."""
    with serve(checkpoints, env) as (url, _, _):
        engine = engine_of(url)
        route = f"{url}/libretranslate/translate"
        label = f"ours ({engine}{'' if env else ', default'})"
        return label, translate_each(route, answered), measure(route, texts, args)


def run_libretranslate(
    python: str, checkpoint: Path, work: Path, texts: list[str], answered: list[str], args: argparse.Namespace
) -> Row:
    build_argos_package(checkpoint, work / "argos" / f"translate-{checkpoint.name}")
    with (
        tempfile.TemporaryFile() as log,
        serve_libretranslate(python, work / "argos", work, log, args.lt_env) as url,
    ):
        route = f"{url}/translate"
        return "LibreTranslate 1.9.6", translate_each(route, answered), measure(route, texts, args)


def report(rows: list[Row], connections: list[int], diffs: int, answered: list[str]) -> None:
    """The markdown table (ratio: req/s over LibreTranslate's at the same connections), then the answers."""
    _, lt_answers, lt_loads = rows[0]
    print("| server | connections | req/s | p50 ms | p99 ms | errors | ratio to LibreTranslate |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, _, loads in rows:
        for c, load, lt in zip(connections, loads, lt_loads, strict=True):
            ratio = load.rps / lt.rps if lt.rps else float("nan")
            flag = " (client-bound)" if load.client_bound else ""
            print(
                f"| {label} | {c} | {load.rps:.1f}{flag} | {load.p50:.0f} | {load.p99:.0f} | {load.errors} | {ratio:.2f}× |"
            )
    print()
    for label, got, loads in rows[1:]:
        same = sum(a == b for a, b in zip(got, lt_answers, strict=True))
        words = sum(words_of(a) == words_of(b) for a, b in zip(got, lt_answers, strict=True))
        verdict = [f"{same / len(got):.1%} identical (target ≥ {TARGET['identical']:.0%})"]
        verdict.append(f"{words / len(got):.1%} the same words (case and punctuation aside)")
        for c, load, lt in zip(connections, loads, lt_loads, strict=True):
            if (want := TARGET.get(str(c))) is not None:
                ratio = load.rps / lt.rps if lt.rps else float("nan")
                verdict.append(f"{ratio:.2f}× at {c} (target ≥ {want:.0f}×)")
        print(f"{label}: answers identical to LibreTranslate's on {same}/{len(got)}; " + ", ".join(verdict))
        shown = [(s, a, b) for s, a, b in zip(answered, got, lt_answers, strict=True) if a != b][:diffs]
        for s, a, b in shown:
            print(f"  {s!r}: ours {a!r}, LibreTranslate {b!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libretranslate-python", default=os.environ.get("LIBRETRANSLATE_PYTHON"))
    ap.add_argument("--checkpoint", type=Path, default=REPO / "checkpoints" / "translate-fr-en")
    ap.add_argument("--connections", default="1,16,64")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per load (after 1 s of warm-up)")
    ap.add_argument("--sentences", type=int, default=500, help="distinct sentences sent round-robin")
    ap.add_argument("--answers", type=int, default=200, help="sentences whose answers are compared")
    ap.add_argument("--clients", type=int, default=max(1, min(8, (os.cpu_count() or 1) // 4)))
    ap.add_argument(
        "--lt-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="LibreTranslate's environment, e.g. ARGOS_INTRA_THREADS=1 (default: its own defaults)",
    )
    ap.add_argument("--diffs", type=int, default=3, help="differing answers to print")
    args = ap.parse_args(argv)
    python, why = lt_python(args.libretranslate_python)
    if python is None:
        print(f"skipped: {why} (pip install libretranslate==1.9.6 in a venv; pass its bin/python)")
        return 0
    args.connections = [int(c) for c in args.connections.split(",")]
    args.lt_env = dict(kv.split("=", 1) for kv in args.lt_env)
    texts = sentences(max(args.sentences, args.answers))
    answered = texts[:: max(1, len(texts) // args.answers)][: args.answers]  # short to long, as texts
    with tempfile.TemporaryDirectory(prefix="vs-libretranslate-") as tmp:
        work = Path(tmp)
        rows = [run_libretranslate(python, args.checkpoint, work, texts, answered, args)]
        (work / "ours").mkdir()
        (work / "ours" / args.checkpoint.name).symlink_to(args.checkpoint.resolve())
        rows.append(run_ours(work / "ours", {}, texts, answered, args))
        default = rows[-1][0]
        for engine in ENGINES:
            if f"({engine}," not in default:
                env = {"APP_TRANSLATION_ENGINE": engine}
                rows.append(run_ours(work / "ours", env, texts, answered, args))
    lt = ", ".join(f"{k}={v}" for k, v in args.lt_env.items()) or "otherwise its defaults"
    print(f"fr->en, {len(texts)} distinct Tatoeba test sentences round-robin, {args.duration:g} s per load;")
    print(f"LibreTranslate: a rule sentence split (not MiniSBD), {lt}\n")
    report(rows, args.connections, args.diffs, answered)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
