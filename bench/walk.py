"""Walk one POST /sentiment and one POST /translate through the code: which files of app/ and model/ it passes, how often it changes
file, and how often it comes back to a file it had already left (what a reader following the request does).

  python bench/walk.py                      # this checkout
  python bench/walk.py --code /work/main    # another checkout's app/ and model/ (same tiny checkpoints)

The app runs in-process (httpx ASGITransport, lifespan on) on tiny random checkpoints
(bench/make_tiny_checkpoints.py, written to a temporary folder unless --checkpoints names one). One request
warms up (batchers are created on first use), then one request is traced with sys.setprofile in the event
loop's thread and threading.setprofile in the inference workers' threads (set before they start).

Per thread, the reader's place is the innermost frame whose file is under app/ or model/: a call into such a
file moves it there, a return moves it to the innermost such frame left on the stack (library frames in
between are passed through). Counts, summed over the threads: the distinct files, the file changes, and the
returns (a change to a file the thread had already left before).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
WALKS = {  # route -> the body of its one traced request (/translate: one sentence, greedy)
    "/sentiment": {"text": "the movie was good and the acting wonderful"},
    "/translate": {"text": "le chat dort sur le canapé", "source_lang": "fr", "target_lang": "en"},
}


class Walk:
    """Per thread, the sequence of app/ and model/ files the reader is in (consecutive repeats collapsed)."""

    def __init__(self, code: Path) -> None:
        self.roots = tuple(f"{code / d}/" for d in ("app", "model"))
        self.code = code
        self.active = False
        self.paths: dict[int, list[str]] = {}
        self._scope: dict[str, str | None] = {}  # co_filename -> relative path (None: out of scope)

    def _rel(self, filename: str) -> str | None:
        rel = self._scope.get(filename, "")
        if rel == "":
            rel = self._scope[filename] = (
                str(Path(filename).relative_to(self.code)) if filename.startswith(self.roots) else None
            )
        return rel

    def _innermost(self, frame: FrameType | None) -> str | None:
        while frame is not None:
            if (rel := self._rel(frame.f_code.co_filename)) is not None:
                return rel
            frame = frame.f_back
        return None

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.active or event not in ("call", "return"):
            return
        where = self._innermost(frame if event == "call" else frame.f_back)
        if where is None:
            return
        path = self.paths.setdefault(threading.get_ident(), [])
        if not path or path[-1] != where:
            path.append(where)

    def summary(self) -> dict[str, Any]:
        files: set[str] = set()
        changes = returns = 0
        back: Counter[str] = Counter()
        for path in self.paths.values():
            files.update(path)
            changes += max(0, len(path) - 1)
            seen: set[str] = set()
            for prev, cur in zip(path, path[1:], strict=False):
                seen.add(prev)
                if cur in seen:
                    returns += 1
                    back[cur] += 1
        return {
            "app_files": sorted(f for f in files if f.startswith("app/")),
            "model_files": sorted(f for f in files if f.startswith("model/")),
            "changes": changes,
            "returns": returns,
            "returns_by_file": back.most_common(),
            "threads": len(self.paths),
        }


async def walk(code: Path, checkpoints: Path) -> dict[str, dict[str, Any]]:
    """Per route of WALKS, the summary of its traced request."""
    import httpx
    from asgi_lifespan import LifespanManager

    from app.core.settings import Settings
    from app.main import create_app

    tracers = {route: Walk(code) for route in WALKS}
    current: list[Walk] = [tracers["/sentiment"]]

    def trace(frame: FrameType, event: str, arg: Any) -> None:
        current[0](frame, event, arg)

    sys.setprofile(trace)
    threading.setprofile(trace)  # the inference workers start in the lifespan, after this
    try:
        app = create_app(Settings(checkpoint_dir=checkpoints))
        async with (
            LifespanManager(app, startup_timeout=120, shutdown_timeout=30) as manager,
            httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://walk") as client,
        ):
            while (await client.get("/ready")).status_code != 200:
                await asyncio.sleep(0.05)
            # and the graphs built (APP_TORCHSCRIPT_AFTER_READY): the walk is the steady state's
            while {"pending", "building"} & {
                m.get("graphs") for m in (await client.get("/models")).json()["models"]
            }:
                await asyncio.sleep(0.05)
            for route, body in WALKS.items():
                current[0] = tracer = tracers[route]
                assert (await client.post(route, json=body)).status_code == 200  # warm-up
                tracer.active = True
                r = await client.post(route, json=body)
                tracer.active = False
                assert r.status_code == 200, r.text
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return {route: tracer.summary() for route, tracer in tracers.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--code", type=Path, default=HERE.parent, help="the checkout whose app/ and model/ run")
    p.add_argument("--checkpoints", type=Path, help="a folder of bench/make_tiny_checkpoints.py output")
    p.add_argument("--files", action="store_true", help="list the files passed")
    args = p.parse_args()
    code = args.code.resolve()
    sys.path.insert(0, str(code))
    with tempfile.TemporaryDirectory() as tmp:
        checkpoints = args.checkpoints
        if checkpoints is None:
            checkpoints = Path(tmp) / "ckpt"
            tiny = [str(checkpoints), "--d-model", "16", "--layers", "1", "--heads", "1"]
            subprocess.run([sys.executable, str(HERE / "make_tiny_checkpoints.py"), *tiny], check=True)
        walks = asyncio.run(walk(code, checkpoints))
    for route, s in walks.items():
        print(
            f"POST {route} ({code}): {len(s['app_files'])} files of app/, {len(s['model_files'])} of model/, "
            f"{s['changes']} file changes, {s['returns']} returns to a file already left "
            f"({s['threads']} threads)"
        )
        print("returns by file: " + ", ".join(f"{f} {n}" for f, n in s["returns_by_file"]))
        if args.files:
            print("\n".join(s["app_files"] + s["model_files"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
