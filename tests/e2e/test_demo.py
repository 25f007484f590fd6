"""The demo page at GET / in headless chromium against a uvicorn subprocess serving tiny random-weight models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from model import Translator, save_checkpoint
from tests.conftest import link_checkpoints, tiny_translation_config
from tests.e2e.browser import (
    REPO_ROOT,
    launch,
    new_page,
    require_browser,
    server,
    show_sentiment_and_attention,
)

sync_api = require_browser()

pytestmark = pytest.mark.slow
ARTIFACTS = REPO_ROOT / "artifacts"
FR = "Le chat regarde la maison. Mon ami aime la musique."


@pytest.fixture(scope="module")
def checkpoint_dir(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_sentiment_checkpoint: Path,
    tiny_sentiment_ko_checkpoint: Path,
    tiny_tokenizer_path: Path,
    tiny_vocab_size: int,
) -> Path:
    root = link_checkpoints(
        tmp_path_factory.mktemp("e2e-checkpoints"), tiny_sentiment_checkpoint, tiny_sentiment_ko_checkpoint
    )
    # a 3-layer encoder with a 2-layer decoder, as the shipped fr-en (4 and 3): the page's layer menu
    # must follow the map kind
    torch.manual_seed(0)
    cfg = tiny_translation_config(tiny_vocab_size, n_layers=3, n_decoder_layers=2)
    save_checkpoint(
        root / "translate-fr-en", Translator(cfg).eval(), tiny_tokenizer_path, dtype=torch.float32
    )
    return root


@pytest.fixture(scope="module")
def url(checkpoint_dir: Path) -> Iterator[str]:
    with server(checkpoint_dir, APP_MAX_CHARS="300", APP_MAX_FILE_BYTES="2048") as u:
        yield u


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        b = launch(pw)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, url: str) -> Iterator[Any]:
    errors: list[str] = []
    p = new_page(browser, url, errors=errors)
    yield p
    p.context.close()
    assert not errors, errors  # no uncaught JavaScript errors


def api(url: str, path: str, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    r = httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def shown_error(page: Any, section: str) -> str:
    box = page.locator(f"#{section}-error")
    box.wait_for(state="visible")
    return box.inner_text()  # type: ignore[no-any-return]


def test_sentiment_shows_label_and_probabilities(page: Any, url: str) -> None:
    for text, model in (
        ("The story was not bad at all.", "sentiment-en"),
        ("정말 재미있어요", "sentiment-ko"),
    ):
        page.fill("#sentiment-text", text)
        page.click("#sentiment-submit")
        result = page.locator("#sentiment-result")
        result.get_by_text(model).wait_for()
        expected = api(url, "/sentiment", {"text": text})["results"][0]
        assert page.text_content("[data-testid=sentiment-label]") == expected["label"]
        probs = page.locator("[data-testid=sentiment-prob]")
        assert probs.count() == 2
        for i in range(2):
            label = probs.nth(i).get_attribute("data-label")
            assert float(probs.nth(i).get_attribute("data-probability")) == pytest.approx(
                expected["probabilities"][label], abs=1e-6
            )
            assert f"{100 * expected['probabilities'][label]:.1f}%" in probs.nth(i).inner_text()


def test_translation_shows_n_best_with_scores(page: Any, url: str) -> None:
    assert page.locator("#translate-pair option").all_inner_texts() == ["detect language → en", "fr → en"]
    assert page.input_value("#translate-pair") == "auto>en"  # the default: the API detects the language
    page.select_option("#translate-pair", "fr>en")
    page.fill("#translate-text", FR)
    page.check("#decoding-beam")
    page.fill("#beam-size", "4")
    page.fill("#num-hypotheses", "3")
    page.click("#translate-submit")
    page.locator("[data-testid=hypothesis]").first.wait_for()
    hyps = page.locator("[data-testid=hypothesis]")
    body = {"text": FR, "source_lang": "fr", "beam_size": 4, "num_hypotheses": 3, "return_scores": True}
    expected = api(url, "/translate", body)["results"][0]["hypotheses"]
    assert hyps.count() == 3
    scores = [float(s) for s in page.locator("[data-testid=hypothesis-score]").all_inner_texts()]
    assert scores == pytest.approx([h["score"] for h in expected], abs=1e-3)
    texts = page.locator("[data-testid=hypothesis] .hyp-text").all_inner_texts()
    assert [t.strip() for t in texts] == [h["translation"].strip() for h in expected]

    page.check("#decoding-greedy")
    assert page.is_disabled("#beam-size")
    page.click("#translate-submit")
    page.get_by_text("· greedy ·").wait_for()
    assert hyps.count() == 1


def test_translation_detects_the_language_or_passes_it_through(page: Any, url: str) -> None:
    """The default "auto": the detected language and the model that answered are shown; English into
    English comes back unchanged, answered by "passthrough"."""
    page.fill("#translate-text", FR)
    page.click("#translate-submit")
    page.locator("[data-testid=translate-model]").wait_for()
    assert page.get_attribute("[data-testid=translate-detected]", "data-language") == "fr"
    assert page.get_attribute("[data-testid=translate-model]", "data-model") == "translate-fr-en"
    en = "The cat sleeps on the sofa every day."
    page.fill("#translate-text", en)
    page.click("#translate-submit")
    page.locator("[data-testid=translate-model][data-model=passthrough]").wait_for()
    assert page.get_attribute("[data-testid=translate-detected]", "data-language") == "en"
    assert page.locator("[data-testid=hypothesis] .hyp-text").all_inner_texts() == [en]


def downloaded(page: Any) -> tuple[str, str]:
    """Click the result's download link -> (the saved file's name, its text)."""
    link = page.locator("[data-testid=translate-download]")
    with page.expect_download() as info:
        link.click()
    return info.value.suggested_filename, Path(info.value.path()).read_text(encoding="utf-8")


def drop_file(page: Any, selector: str, name: str, text: str) -> None:
    """Drop a file of `text` named `name` on the element, as a drag from the desktop does."""
    transfer = page.evaluate_handle(
        """([name, text]) => { const dt = new DataTransfer();
        dt.items.add(new File([text], name, { type: "text/plain" })); return dt; }""",
        [name, text],
    )
    page.dispatch_event(selector, "dragover", {"dataTransfer": transfer})
    page.dispatch_event(selector, "drop", {"dataTransfer": transfer})


def test_file_dropped_or_chosen_comes_back_translated(page: Any, url: str, tmp_path: Path) -> None:
    """A .txt file, chosen with the picker or dropped on the text area or the drop zone, is offered as a
    download named as the upload, its lines translated as POST /translate translates them; a refused file
    shows the API's error."""
    lines = FR.split(". ")
    content = f"{lines[0]}.\n\n  {lines[1]}\n"
    answer = api(url, "/translate", {"texts": [f"{lines[0]}.", lines[1]], "source_lang": "fr"})
    first, second = (r["translation"] for r in answer["results"])
    expected = f"{first}\n\n  {second}\n"
    page.select_option("#translate-pair", "fr>en")
    (tmp_path / "notes.txt").write_text(content, encoding="utf-8")
    page.set_input_files("#translate-file", str(tmp_path / "notes.txt"))  # what the picker button opens
    assert downloaded(page) == ("notes.txt", expected)
    assert "notes.txt translated from fr into en" in page.inner_text("#translate-result")
    for zone, name in (("#translate-text", "texte.txt"), ("#translate-drop", "drop.txt")):
        drop_file(page, zone, name, content)
        page.locator(f"[data-testid=translate-download][download='{name}']").wait_for()
        assert downloaded(page) == (name, expected)
    assert page.get_attribute("#translate-file", "accept") == ",".join(
        httpx.get(f"{url}/libretranslate/frontend/settings").json()["supportedFilesFormat"]
    )

    drop_file(page, "#translate-drop", "big.txt", "Le chat dort.\n" * 200)  # over APP_MAX_FILE_BYTES=2048
    assert shown_error(page, "translate") == "413 · the file is larger than 2048 bytes (APP_MAX_FILE_BYTES)"
    drop_file(page, "#translate-drop", "notes.pdf", content)
    page.get_by_text("415 · unsupported file format").wait_for()
    page.set_input_files("#translate-file", str(tmp_path / "notes.txt"))  # a success clears the error
    page.locator("#translate-error").wait_for(state="hidden")


def test_attention_heatmap_matches_the_api(page: Any, url: str) -> None:
    text, target = "Le chat aime la musique.", "the cat likes the music"
    page.select_option("#attention-model", "translate-fr-en")
    page.fill("#attention-text", text)
    page.fill("#attention-target", target)
    page.click("#attention-submit")
    heatmap = page.locator("#heatmap")
    page.wait_for_selector("#heatmap[data-rows]")
    att = api(url, "/attention", {"model": "translate-fr-en", "text": text, "target": target})
    src, tgt = att["source_tokens"], att["target_tokens"]
    assert (len(att["layers"]), len(att["decoder_layers"])) == (3, 2)
    n_heads = len(att["heads"])
    for kind, rows, cols in (("encoder", src, src), ("decoder", tgt, tgt), ("cross", tgt, src)):
        n_layers = len(att["layers"] if kind == "encoder" else att["decoder_layers"])
        page.click(f"#attention-kind [data-kind={kind}]")
        page.wait_for_selector(f"#heatmap[data-kind={kind}]")
        assert (heatmap.get_attribute("data-rows"), heatmap.get_attribute("data-cols")) == (
            str(len(rows)),
            str(len(cols)),
        )
        assert page.locator("#heatmap-rows .tok").all_inner_texts() == rows
        assert page.locator("#heatmap-cols .tok").count() == len(cols)
        assert page.locator("[data-testid=head-thumb]").count() == n_layers * (n_heads + 1)
        assert page.locator("#attention-layer option").count() == n_layers

    # the encoder's last layer (2) has no decoder twin: cross-attention shows its last (1), and back on the
    # encoder the choice is kept
    page.click("#attention-kind [data-kind=encoder]")
    page.select_option("#attention-layer", "2")
    page.wait_for_selector("#heatmap[data-layer='2']")
    page.click("#attention-kind [data-kind=cross]")
    page.wait_for_selector("#heatmap[data-kind=cross][data-layer='1']")
    page.click("#attention-kind [data-kind=encoder]")
    page.wait_for_selector("#heatmap[data-kind=encoder][data-layer='2']")
    page.click("#attention-kind [data-kind=cross]")

    # cross-attention, last layer, head 1: hovering a cell names the token pair and its weight
    layer, head, q, k = n_layers - 1, n_heads - 1, len(tgt) - 1, 1
    page.select_option("#attention-layer", str(layer))
    page.select_option("#attention-head", str(head))
    box = heatmap.bounding_box()
    cell_w, cell_h = box["width"] / len(src), box["height"] / len(tgt)
    heatmap.hover(position={"x": (k + 0.5) * cell_w, "y": (q + 0.5) * cell_h})  # scrolls it into view
    tip = page.locator("[data-testid=heatmap-tooltip]")
    tip.wait_for(state="visible")
    weight = att["cross_attention"][layer][head][q][k]
    assert tip.inner_text().startswith(f"{tgt[q]} → {src[k]}: ")
    assert float(tip.inner_text().rsplit(": ", 1)[1]) == pytest.approx(weight, abs=1e-4)
    assert f"“{tgt[q]}”" in page.inner_text("#heatmap-status")

    # a thumbnail of the all-heads grid opens that layer/head; a classifier has only encoder attention
    page.click("[data-testid=head-thumb][data-layer='0'][data-head='avg']")
    assert (heatmap.get_attribute("data-layer"), heatmap.get_attribute("data-head")) == ("0", "avg")
    page.select_option("#attention-model", "sentiment-en")
    assert page.is_hidden("#attention-target")
    page.click("#attention-submit")
    page.wait_for_selector("#heatmap[data-kind=encoder]")
    att = api(url, "/attention", {"model": "sentiment-en", "text": text})
    assert (
        heatmap.get_attribute("data-rows")
        == heatmap.get_attribute("data-cols")
        == str(len(att["source_tokens"]))
    )
    assert page.is_disabled("#attention-kind [data-kind=cross]")


def test_api_errors_are_shown(page: Any) -> None:
    page.fill("#sentiment-text", "   ")
    page.click("#sentiment-submit")
    assert shown_error(page, "sentiment") == "422 · text: must not be empty or whitespace only"
    page.fill("#sentiment-text", "x" * 301)
    page.click("#sentiment-submit")
    page.get_by_text("at most 300 characters").wait_for()
    assert shown_error(page, "sentiment") == "422 · text: at most 300 characters per text (got 301)"

    page.fill("#translate-text", FR)
    page.fill("#beam-size", "2")
    page.fill("#num-hypotheses", "3")
    page.click("#translate-submit")
    assert "num_hypotheses: must be at most beam_size (2), got 3" in shown_error(page, "translate")
    page.fill("#attention-text", "")
    page.click("#attention-submit")
    assert shown_error(page, "attention").startswith("422 · text: ")
    page.fill("#sentiment-text", "fine")  # a success clears the section's error
    page.click("#sentiment-submit")
    page.locator("#sentiment-error").wait_for(state="hidden")


def test_api_key(browser: Any, checkpoint_dir: Path) -> None:
    with server(checkpoint_dir, APP_API_KEY="s3cret") as keyed:
        for path in ("/", "/static/app.js", "/static/style.css", "/static/index.html"):
            assert httpx.get(f"{keyed}{path}").status_code == 200, (
                path
            )  # public: the page is where the key goes
        assert httpx.get(f"{keyed}/models").status_code == 401
        page = new_page(browser, keyed)
        assert "401 · missing or invalid API key" in shown_error(page, "global")
        page.fill("#api-key", "wrong")
        page.click("#api-key-save")
        page.click("#sentiment-submit")
        assert shown_error(page, "sentiment").startswith("401 · missing or invalid API key")
        page.fill("#api-key", "s3cret")
        page.click("#api-key-save")
        page.wait_for_selector("#status.ok")
        page.click("#sentiment-submit")
        page.wait_for_selector("[data-testid=sentiment-label]")
        assert page.is_hidden("#sentiment-error")
        page.reload()  # kept in localStorage
        page.wait_for_selector("#status.ok")
        assert page.input_value("#api-key") == "s3cret"
        page.context.close()


def test_screenshots_desktop_and_phone(browser: Any, url: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    for name, phone in (("demo-desktop", False), ("demo-phone", True)):
        page = new_page(browser, url, phone=phone)
        show_sentiment_and_attention(page, "A wonderful, moving film. The cast is great!")
        if phone:  # nothing wider than the screen: the heatmap scrolls inside its own box
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        page.context.close()
