"""bench/files.py: the document holds the sentences as paragraphs, and a short run on tiny checkpoints
translates it both ways without errors while /sentiment clients are answered."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from app.files.formats import FORMATS
from bench.files import BENCH_ENV, build_docx, docx_paragraphs, paragraphs, run
from bench.server import serve

FR = [f"Le chat numéro {i} dort." for i in range(10)]


def test_paragraphs_hold_every_sentence_in_order() -> None:
    paras = paragraphs(FR, 4)
    assert len(paras) == 3
    assert " ".join(paras) == " ".join(FR)
    assert paras[-1] == "Le chat numéro 8 dort. Le chat numéro 9 dort."


def test_the_document_is_read_by_the_service_as_its_paragraphs() -> None:
    data = build_docx(paragraphs(FR, 4))
    assert docx_paragraphs(data) == paragraphs(FR, 4)
    assert FORMATS[".docx"].open(data).texts == paragraphs(FR, 4)


@pytest.mark.slow
def test_a_short_run_translates_the_file_and_the_texts(bench_checkpoint_dir: Path) -> None:
    args = argparse.Namespace(
        per_paragraph=2, texts=2, concurrency=2, sentiment_clients=2, seconds=0.3, timeout=60.0
    )
    with serve(bench_checkpoint_dir, BENCH_ENV) as (url, _, _):
        phases, n_paras, same = asyncio.run(run(url, args, FR))
    assert [p.label for p in phases] == [
        "/sentiment alone",
        "/translate/file",
        "/translate",
        "/translate, one request",
        "/translate/file + /sentiment",
        "/translate + /sentiment",
        "/translate, one request + /sentiment",
    ]
    assert n_paras == 5
    assert 0 <= same <= n_paras
    assert not any(p.errors for p in phases)
    assert all(p.sentences == len(FR) for p in phases[1:])
    assert phases[0].latencies
    assert not phases[1].latencies
