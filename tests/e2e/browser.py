"""A uvicorn server subprocess and a headless chromium for the demo page; also the README screenshot:

python -m tests.e2e.browser --checkpoint-dir checkpoints --out docs/demo.png
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from bench.server import free_port, server_cmd, server_env, stop, wait_ready

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")  # Debian's package, which Playwright drives (no browser download)
# On a fresh Debian machine: the venv, chromium (scripts/install_browser.sh: apt as root or via sudo), these tests.
INSTALL_BROWSER = "make e2e"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def require_browser() -> ModuleType:
    """playwright.sync_api, for a test module (called at its import): the module is skipped, saying how to
    install them, when chromium or playwright is missing."""
    import pytest

    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is missing: `{INSTALL_BROWSER}` installs it and runs these tests",
            allow_module_level=True,
        )
    return pytest.importorskip("playwright.sync_api", reason=f"playwright is missing: `{INSTALL_BROWSER}`")


@contextmanager
def server(checkpoint_dir: Path, timeout: float = 60.0, **env: str) -> Iterator[str]:
    """`python -m app` on a free 127.0.0.1 port until /ready is 200; yields its URL, SIGTERM at exit."""
    port = free_port()
    cmd = server_cmd(port)
    proc = subprocess.Popen(
        cmd,
        env=server_env({"APP_CHECKPOINT_DIR": str(checkpoint_dir)} | env),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, timeout)
        yield url
    finally:
        stop(proc)


def launch(pw: Playwright) -> Browser:
    return pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


def new_page(
    browser: Browser, url: str, phone: bool = False, errors: list[str] | None = None, **kw: Any
) -> Page:
    """A fresh context (own localStorage) with the page loaded and the model list filled in; uncaught
    JavaScript errors are appended to `errors`."""
    if phone:
        kw |= {"viewport": PHONE, "device_scale_factor": 2, "is_mobile": True, "has_touch": True}
    else:
        kw |= {"viewport": DESKTOP}
    page = browser.new_context(**kw).new_page()
    page.set_default_timeout(10_000)
    if errors is not None:
        page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector("#status.ok, #status.bad")
    return page


def show_sentiment_and_attention(page: Page, text: str, kind: str = "encoder") -> None:
    """Classify `text`, then open its attention from the result (the README view)."""
    page.fill("#sentiment-text", text)
    page.click("#sentiment-submit")
    page.wait_for_selector("[data-testid=sentiment-label]")
    page.click("#sentiment-attention")
    page.wait_for_selector("#attention-view:not([hidden]) #heatmap[data-rows]")
    page.click(f"#attention-kind [data-kind={kind}]")


def main() -> int:
    parser = argparse.ArgumentParser(description="Screenshot the demo page (sentiment + attention).")
    parser.add_argument("--checkpoint-dir", type=Path, default=REPO_ROOT / "checkpoints")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "demo.png")
    parser.add_argument("--text", default="A wonderful, moving film.")
    parser.add_argument("--phone", action="store_true", help="390x844 instead of 1280x900")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with server(args.checkpoint_dir) as url, sync_playwright() as pw:
        browser = launch(pw)
        page = new_page(browser, url, phone=args.phone)
        show_sentiment_and_attention(page, args.text)
        heatmap = page.locator("#heatmap")
        rows, cols = int(heatmap.get_attribute("data-rows")), int(heatmap.get_attribute("data-cols"))  # type: ignore[arg-type]
        cell = float(heatmap.get_attribute("data-cell"))  # type: ignore[arg-type]
        heatmap.hover(position={"x": (cols // 3 + 0.5) * cell, "y": (rows // 2 + 0.5) * cell})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(args.out), full_page=True)
        browser.close()
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
