"""The demo page with the shipped translators (real weights): what a visitor types into the default page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.browser import REPO_ROOT, launch, new_page, require_browser, server

sync_api = require_browser()

pytestmark = pytest.mark.slow
TRANSLATORS = ("translate-fr-en", "translate-es-en", "translate-de-en")
SHIPPED = REPO_ROOT / "checkpoints"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not all((SHIPPED / name / "config.json").is_file() for name in TRANSLATORS):
        pytest.skip("the shipped translators are not in checkpoints/")
    root = tmp_path_factory.mktemp("shipped-translators")
    for name in TRANSLATORS:
        (root / name).symlink_to(SHIPPED / name, target_is_directory=True)
    with server(root, timeout=120) as u:
        yield u


def test_a_french_sentence_in_the_default_page_gets_english_from_fr_en(url: str) -> None:
    """Issue 30: the page used to start at "de → en" and sent French to the German model. It starts at
    "auto" now: the API detects French and translate-fr-en answers, in English, with its price and time kept
    verbatim (taken out of what the model reads and put back)."""
    with sync_api.sync_playwright() as pw:
        browser = launch(pw)
        errors: list[str] = []
        page: Any = new_page(browser, url, errors=errors)
        assert page.input_value("#translate-pair") == "auto>en"
        page.fill("#translate-text", "Le billet coûte 15 € et le train part à 19:30.")
        page.click("#translate-submit")
        page.locator("[data-testid=translate-model]").wait_for()
        assert page.get_attribute("[data-testid=translate-detected]", "data-language") == "fr"
        assert page.get_attribute("[data-testid=translate-model]", "data-model") == "translate-fr-en"
        answer = page.locator("[data-testid=hypothesis] .hyp-text").first.inner_text()
        browser.close()
    assert not errors, errors
    detected = httpx.post(f"{url}/detect", json={"text": answer}, timeout=30).json()["results"][0]
    assert detected["language"] == "en", answer
    words = answer.lower().replace(".", " ").split()
    assert any(w.startswith("ticket") for w in words), answer
    assert "train" in words, answer
    assert "15 €" in answer, answer  # protected items come back verbatim (issue 35)
    assert "19:30" in answer, answer
