"""A document through POST /translate/file against the same sentences through POST /translate, in one run, and
what it does to /sentiment clients beside it (issue 45 §2).

    python -m bench.files [--sentences 1000] [--per-paragraph 4] [--texts 16] [--concurrency 4]
        [--sentiment-clients 4] [--seconds 10] [--checkpoint-dir checkpoints] [--env KEY=VALUE ...]

The document: a .docx (python-docx) of --sentences distinct French sentences of the Tatoeba fr-en test split
(spread over it), --per-paragraph to a paragraph. The server (`python -m app`, bench/server.py) serves the
checkpoints' translate-fr-en and sentiment-en only, with APP_MAX_WORK and APP_MAX_QUEUE_WORK raised so that
the whole document is one admissible request (at the defaults it is a 422: 1,000 sentences cost ~142,000
work units, more than APP_MAX_WORK's 50,000) and APP_REQUEST_TIMEOUT_S raised so that it is not a 504 on a
slow machine; --env overrides.

Phases, one after the other on the warmed server: /sentiment clients alone (--seconds); the file once; the
paragraphs through /translate, --texts a request, --concurrency requests in flight; every paragraph in one
/translate request (what the file is: one translation call), these three twice, in one order then the other,
each one's faster kept; then the three again, each with the /sentiment clients looping beside it until it ends. Sentences/s: the
document's sentences over the wall time of the phase. The file's paragraphs are checked against /translate's.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docx
import httpx

from bench.heavy_mix import sentiment_loops
from bench.load import SHORT_TEXTS, percentile
from bench.server import REPO, serve
from bench.vs_libretranslate import sentences as test_sentences

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MODELS = ("translate-fr-en", "sentiment-en")
BENCH_ENV = {  # APP_MAX_TEXTS: the whole document in one /translate request too (its cap)
    "APP_MAX_WORK": "1000000", "APP_MAX_QUEUE_WORK": "4000000", "APP_REQUEST_TIMEOUT_S": "600", "APP_MAX_TEXTS": "4096",
}  # fmt: skip
ONE_REQUEST = "/translate, one request"


@dataclass
class Phase:
    label: str
    seconds: float  # wall time of the translation (or of the sentiment clients alone)
    sentences: int  # 0: no translation in this phase
    latencies: list[float]  # the /sentiment clients' answers in ms, sorted; [] without them
    errors: int  # non-200 answers, translation and /sentiment


def paragraphs(texts: Sequence[str], per_paragraph: int) -> list[str]:
    """The sentences joined `per_paragraph` at a time (the last paragraph may hold fewer)."""
    return [" ".join(texts[i : i + per_paragraph]) for i in range(0, len(texts), per_paragraph)]


def build_docx(paras: Sequence[str]) -> bytes:
    """A Word document with one body paragraph per text."""
    doc = docx.Document()
    for p in paras:
        doc.add_paragraph(p)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def docx_paragraphs(data: bytes) -> list[str]:
    """The text of each non-empty body paragraph."""
    return [p.text for p in docx.Document(io.BytesIO(data)).paragraphs if p.text.strip()]


async def translate_file(client: httpx.AsyncClient, data: bytes) -> tuple[list[str], int]:
    """The document through POST /translate/file -> (its translated paragraphs, errors)."""
    files = {"file": ("bench.docx", data, DOCX)}
    r = await client.post("/translate/file", files=files, data={"source_lang": "fr", "target_lang": "en"})
    if r.status_code != 200:
        print(f"/translate/file: {r.status_code} {r.text[:300]}")
        return [], 1
    return docx_paragraphs(r.content), 0


async def translate_texts(
    client: httpx.AsyncClient, paras: Sequence[str], per_request: int, concurrency: int
) -> tuple[list[str], int]:
    """The paragraphs through POST /translate, `per_request` a request, `concurrency` in flight -> (their
    translations in order, errors)."""
    chunks = [list(paras[i : i + per_request]) for i in range(0, len(paras), per_request)]
    out: list[list[str]] = [[] for _ in chunks]
    gate = asyncio.Semaphore(concurrency)
    errors = 0

    async def one(k: int) -> None:
        nonlocal errors
        async with gate:
            r = await client.post("/translate", json={"texts": chunks[k], "source_lang": "fr"})
        if r.status_code != 200:
            print(f"/translate: {r.status_code} {r.text[:300]}")
            errors += 1
            return
        out[k] = [x["translation"] for x in r.json()["results"]]

    await asyncio.gather(*(one(k) for k in range(len(chunks))))
    return [t for chunk in out for t in chunk], errors


async def beside(
    client: httpx.AsyncClient,
    clients: int,
    work: asyncio.Future[tuple[list[str], int]] | None,
    seconds: float,
) -> tuple[list[str], float, list[float], int]:
    """`clients` /sentiment clients while `work` runs (or for `seconds` without it) -> (work's answer, its wall
    seconds, sorted /sentiment latencies, errors)."""
    stop = asyncio.Event()
    t0 = time.perf_counter()
    sentiment = asyncio.ensure_future(sentiment_loops(client, clients, stop))
    if work is None:
        await asyncio.sleep(seconds)
        answer: tuple[list[str], int] = ([], 0)
    else:
        answer = await work
    took = time.perf_counter() - t0
    stop.set()
    latencies, errors = await sentiment
    return answer[0], took, latencies, errors + answer[1]


async def run(url: str, args: argparse.Namespace, texts: Sequence[str]) -> tuple[list[Phase], int, int]:
    """The phases -> (phases, paragraphs, paragraphs the file and /translate translated alike)."""
    paras = paragraphs(texts, args.per_paragraph)
    data = build_docx(paras)
    n = len(texts)
    limits = httpx.Limits(max_connections=args.concurrency + args.sentiment_clients + 2)
    phases: list[Phase] = []
    async with httpx.AsyncClient(base_url=url, timeout=args.timeout, limits=limits) as client:
        # warm both routes and both models at the document's size: the first pass of either ran up to 1.3 times
        # as long as the next, and the first phase measured would be the slower
        await translate_file(client, data)
        await translate_texts(client, paras, args.texts, args.concurrency)
        for _ in range(10):
            await client.post("/sentiment", json={"text": SHORT_TEXTS["en"]})

        _, took, lat, err = await beside(client, args.sentiment_clients, None, args.seconds)
        phases.append(Phase("/sentiment alone", took, 0, lat, err))
        answers: dict[str, list[str]] = {}
        labels = ("/translate/file", "/translate", ONE_REQUEST)
        for clients in (0, args.sentiment_clients):
            # alone: two rounds, the second in the reverse order, each route's faster kept (the first phase after
            # the /sentiment phase ran up to 10% slower, whichever it was)
            rounds = (labels, labels[::-1]) if not clients else (labels,)
            best: dict[str, Phase] = {}
            for label in (x for order in rounds for x in order):
                if label == "/translate/file":
                    work = translate_file(client, data)
                elif label == ONE_REQUEST:  # the file's own shape: every paragraph in one call
                    work = translate_texts(client, paras, len(paras), 1)
                else:
                    work = translate_texts(client, paras, args.texts, args.concurrency)
                out, took, lat, err = await beside(client, clients, asyncio.ensure_future(work), 0)
                answers.setdefault(label, out)
                name = label if not clients else f"{label} + /sentiment"
                if label not in best or took < best[label].seconds:
                    best[label] = Phase(name, took, n, lat, err)
            phases += [best[label] for label in labels]
    file_out, text_out = answers["/translate/file"], answers["/translate"]
    same = sum(a == b for a, b in zip(file_out, text_out, strict=False))
    return phases, len(paras), same


def report(phases: Sequence[Phase], args: argparse.Namespace, n_paras: int, same: int) -> None:
    """The markdown table: sentences/s per route, /sentiment p50/p99 and their ratio to the alone phase's."""
    alone = phases[0]
    base50, base99 = percentile(alone.latencies, 50), percentile(alone.latencies, 99)
    print(
        f"{args.sentences} sentences in {n_paras} paragraphs (.docx); /translate: {args.texts} texts a request, "
        f"{args.concurrency} in flight; {args.sentiment_clients} /sentiment clients"
    )
    print("| phase | seconds | sentences/s | /sentiment answers | p50 ms | p99 ms | p99 / alone | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in phases:
        rate = f"{p.sentences / p.seconds:.1f}" if p.sentences else ""
        p50, p99 = percentile(p.latencies, 50), percentile(p.latencies, 99)
        ratio = f"{p99 / base99:.1f}x" if p.latencies and base99 else ""
        cells = (f"{p50:.1f}", f"{p99:.1f}") if p.latencies else ("", "")
        print(
            f"| {p.label} | {p.seconds:.1f} | {rate} | {len(p.latencies)} | {cells[0]} | {cells[1]} | {ratio} | {p.errors} |"
        )
    print(
        f"\n/sentiment alone: p50 {base50:.1f} ms. Paragraphs translated alike by the file and /translate: {same}/{n_paras}"
    )


def link_models(checkpoint_dir: Path, into: Path) -> Path:
    """`into` made a checkpoint dir of MODELS from `checkpoint_dir` (symlinks)."""
    for name in MODELS:
        (into / name).symlink_to((checkpoint_dir / name).resolve(), target_is_directory=True)
    return into


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", type=Path, default=REPO / "checkpoints")
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--per-paragraph", type=int, default=4, help="sentences per paragraph of the document")
    p.add_argument("--texts", type=int, default=16, help="paragraphs per /translate request")
    p.add_argument("--concurrency", type=int, default=4, help="/translate requests in flight")
    p.add_argument("--sentiment-clients", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10.0, help="the /sentiment clients alone")
    p.add_argument("--timeout", type=float, default=600.0, help="client timeout of a request, s")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE server settings, repeatable")
    args = p.parse_args(argv)
    texts = test_sentences(args.sentences)
    env = BENCH_ENV | dict(kv.split("=", 1) for kv in args.env)
    with (
        tempfile.TemporaryDirectory() as tmp,
        serve(link_models(args.checkpoint_dir, Path(tmp)), env) as server,
    ):
        url = server[0]
        print(f"server {url} with {env}")
        phases, n_paras, same = asyncio.run(run(url, args, texts))
    report(phases, args, n_paras, same)
    return 0 if not any(ph.errors for ph in phases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
