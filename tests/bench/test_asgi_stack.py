"""bench.asgi_stack: the app's own ASGI stack around a stand-in service, and the text half alone."""

from __future__ import annotations

import json

import pytest

from app.core.settings import Settings
from bench.asgi_stack import stack_us, text_us
from bench.server import REPO

SHIPPED = REPO / "checkpoints" / "sentiment-en"


@pytest.mark.parametrize("fast_path", [True, False])
def test_the_stack_answers_each_request(fast_path: bool) -> None:
    settings = Settings(checkpoint_dir=SHIPPED.parent, fast_path=fast_path)
    assert stack_us(settings, json.dumps({"text": "a good film"}).encode(), 50) > 0


def test_a_stack_that_does_not_answer_200_is_an_error() -> None:
    settings = Settings(checkpoint_dir=SHIPPED.parent)
    with pytest.raises(RuntimeError, match="422"):
        stack_us(settings, b'{"text": 5}', 5)


def test_text_work_of_the_shipped_classifier() -> None:
    assert text_us(SHIPPED, ["a good film", "a dull one"], 20) > 0
