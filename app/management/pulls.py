"""APP_MODELS: the models a deployment names, pulled at start when their folder is missing.

Each missing one is pulled by `python -m training pull --progress json SPEC --out-dir CHECKPOINT_DIR` in a
process of its own (the hub client, the importers and transformers stay out of the server; a pull that fails
writes nothing), one after the other while the models on disk load and serve; its JSON lines (training/
progress.py) become `/ready`'s reason ("pulling Helsinki-NLP/opus-mt-fr-en: model.safetensors 120.3 of 300.8
MB"), and once pulled it is loaded as the admin API loads a model (app/management/). A model that cannot be
pulled fails alone, as a broken checkpoint does: /ready names it and why (503 with APP_STRICT_READINESS).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from app.core.settings import REPO_ROOT
from app.core.settings.engines import PULL_SPEC

log = logging.getLogger(__name__)
MB = 1e6
TAIL = 4096  # bytes of a failed pull's stderr kept for its reason


class PullFailed(Exception):
    """A pull exited with an error: its one-line message."""


def folder_name(spec: str) -> str:
    """The folder `python -m training pull SPEC` writes by default: NAME of ORG/NAME, argos-SRC-TGT."""
    match = PULL_SPEC.fullmatch(spec)
    assert match is not None, spec  # the setting's validator has checked it
    return match["repo"] if match["repo"] else f"argos-{match['pair']}"


def missing(specs: list[str], root: Path) -> list[tuple[str, str]]:
    """(spec, folder name) of each named model whose folder the checkpoint directory lacks."""
    return [(spec, name) for spec in specs if not (root / (name := folder_name(spec))).exists()]


async def pull(spec: str, root: Path, progress: Callable[[str], None]) -> Path:
    """`spec` pulled into `root` -> its checkpoint folder; progress(text) at each event; PullFailed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "training", "pull", "--progress", "json", "--out-dir", str(root), spec,
        cwd=REPO_ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stderr is not None
    errors = asyncio.create_task(proc.stderr.read())
    done: Path | None = None
    message = ""
    try:
        async for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            phase = event.get("phase")
            if phase == "download":
                total = event.get("total")
                of = f" of {total / MB:.1f}" if total else ""
                progress(f"{event.get('file')} {event.get('done', 0) / MB:.1f}{of} MB")
            elif phase == "check":
                progress("checking the import")
            elif phase == "done":
                done = Path(event["checkpoint"])
            elif phase == "error":
                message = str(event.get("message", ""))
        code = await proc.wait()
    except BaseException:  # cancelled (shutdown): the pull stops, and writes nothing
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    finally:
        stderr = (await errors)[-TAIL:].decode(errors="replace")
    if code != 0 or done is None:
        lines = [line for line in stderr.splitlines() if line.strip()]
        raise PullFailed(message or (lines[-1] if lines else f"exit status {code}"))
    return done


async def pull_missing(
    specs: list[str],
    root: Path,
    report: Callable[[dict[str, str]], None],
    load: Callable[[str], Awaitable[object]],
    failed: Callable[[str, str], None],
) -> None:
    """Pull each missing model, one after the other, then `load(name)` it. report(name -> what it is at)
    whenever that changes ({} once all are done); failed(name, reason) for one that could not be pulled
    or loaded (the others go on)."""
    todo = missing(specs, root)
    state = {name: "waiting to be pulled" for _, name in todo}
    report(dict(state))
    for spec, name in todo:

        def progress(text: str, name: str = name, spec: str = spec) -> None:
            state[name] = f"pulling {spec}: {text}"
            report(dict(state))

        progress("starting")
        try:
            await pull(spec, root, progress)
            state[name] = f"loading {spec}"
            report(dict(state))
            await load(name)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 (a pull's or a load's error: this model fails alone)
            reason = (
                f"could not be pulled: {e}" if isinstance(e, PullFailed) else str(getattr(e, "message", e))
            )
            log.error("model %s (%s): %s", name, spec, reason)
            failed(name, reason)
        else:
            log.info("model %s pulled (%s) and loaded", name, spec)
        del state[name]
        report(dict(state))
