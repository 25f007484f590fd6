"""Every curl example in README.md, run against the shipped checkpoints in-process: the response it documents
is what the server answers.

A documented JSON response is compared with the real one: strings, labels, integers and list lengths exactly,
each number rounded to the decimals the README shows, dict keys the README leaves out (it abridges) ignored,
`[...]` and `...` standing for anything. A trailing `(422)` is the status code (else 200). A comment that is
not JSON (`# Prometheus text format`) only asks for a 200; `-o FILE` for a 200 with a body.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from tests.app.conftest import serve, wait_graphs, wait_ready

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "checkpoints"
ANY = "<any value>"  # what `[...]` becomes


@dataclass(frozen=True)
class Example:
    line: int  # README line of the curl command
    method: str
    path: str
    json_body: Any
    form: dict[str, str] | None
    output: str | None  # -o FILE
    documented: str  # the comment after it, without '#': a JSON response, prose or ""

    @property
    def id(self) -> str:
        return f"L{self.line}-{self.method}-{self.path.strip('/').replace('/', '-')}"


def _split_comment(command: str) -> tuple[list[str], str]:
    """A shell line's words, and the comment after an unquoted '#'."""
    lexer = shlex.shlex(command, posix=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    words = []
    for word in lexer:
        if word == "#":
            return words, lexer.instream.read()
        words.append(word)
    return words, ""


def _commands(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, shell command, the comment after it) of each curl command in the README's bash blocks."""
    in_bash, lines = False, text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_bash = line.strip() == "```bash" and not in_bash
            i += 1
            continue
        if not (in_bash and line.startswith("curl ")):
            i += 1
            continue
        start, command = i + 1, line
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + lines[i]
        words, comment = _split_comment(command)
        command = shlex.join(words)
        i += 1
        while i < len(lines) and lines[i].startswith("#"):
            comment += " " + lines[i][1:].strip()
            i += 1
        yield start, command, comment.strip()


def _example(line: int, command: str, documented: str) -> Example:
    args = shlex.split(command)[1:]
    path, body, form, output, headers = "", None, {}, None, []
    k = 0
    while k < len(args):
        a = args[k]
        if a in ("-d", "-H", "-o"):
            value = args[k + 1]
            k += 2
            if a == "-H":
                headers.append(value)
            elif a == "-o":
                output = value
            else:
                body = value if body is None else body
                if "=" in value and not value.lstrip().startswith("{"):
                    key, _, v = value.partition("=")
                    form[key] = v
            continue
        if a.startswith("localhost:"):
            path = "/" + a.split("/", 1)[1]
        k += 1
    is_json = any(h.lower() == "content-type: application/json" for h in headers)
    return Example(
        line,
        "POST" if body is not None else "GET",
        path,
        json.loads(body) if is_json and body is not None else None,
        form or None,
        output,
        documented,
    )


def readme_examples() -> list[Example]:
    text = (ROOT / "README.md").read_text()
    return [_example(*c) for c in _commands(text)]


EXAMPLES = readme_examples()


class Number(str):
    """A documented number as written: its decimals say how the real number is rounded."""


def parse_documented(text: str) -> tuple[Any, int] | None:
    """A documented JSON response and its status code, or None for prose."""
    status = 200
    if m := re.search(r"\s+\((\d{3})\)$", text):
        status, text = int(m.group(1)), text[: m.start()]
    text = re.sub(r"\[\.\.\.\]", json.dumps(ANY), text)  # [...], [[[...]]]: anything
    text = re.sub(r",\s*\.\.\.\s*}", "}", text)  # {"a": 1, ...}: the other keys, left out
    try:
        return json.loads(text, parse_float=Number), status
    except json.JSONDecodeError:
        return None


def mismatches(documented: Any, real: Any, where: str = "$") -> list[str]:
    """Where the real response differs from the documented one (see the module docstring)."""
    if documented == ANY:
        return []
    if isinstance(documented, Number):
        decimals = len(documented.partition(".")[2])
        ok = isinstance(real, float | int) and round(real, decimals) == float(documented)
        return [] if ok else [f"{where}: documented {documented}, real {real}"]
    if isinstance(documented, dict):
        if not isinstance(real, dict):
            return [f"{where}: documented an object, real {real!r}"]
        out = [f"{where}.{k}: documented, missing" for k in documented if k not in real]
        for k in documented:
            if k in real:
                out += mismatches(documented[k], real[k], f"{where}.{k}")
        return out
    if isinstance(documented, list):
        if not isinstance(real, list) or len(real) != len(documented):
            return [f"{where}: documented {len(documented)} items, real {real!r}"]
        return [
            e
            for i, (d, r) in enumerate(zip(documented, real, strict=True))
            for e in mismatches(d, r, f"{where}[{i}]")
        ]
    return (
        []
        if documented == real and type(documented) is type(real)
        else [f"{where}: documented {documented!r}, real {real!r}"]
    )


pytestmark = pytest.mark.skipif(
    not (CHECKPOINTS / "sentiment-en" / "config.json").is_file(),
    reason="no shipped checkpoints in checkpoints/",
)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """One app serving checkpoints/ with the default settings, ready, for the whole module."""
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in os.environ if n.startswith("APP_")]:
            mp.delenv(name)  # a developer's settings must not change what the README promises
        # the default settings but a longer deadline: a loaded machine must not turn an answer into a 504
        settings = Settings(checkpoint_dir=CHECKPOINTS, request_timeout_s=300)
        async with serve(settings, ready=False) as (_, client):
            await wait_ready(client, timeout=120)  # five models load in the background
            await wait_graphs(client, timeout=120)  # and their graphs are built after ready
            yield client


def test_the_readme_has_examples() -> None:
    routes = {e.path for e in EXAMPLES}
    assert {"/sentiment", "/translate", "/detect", "/attention", "/libretranslate/translate"} <= routes
    assert sum(parse_documented(e.documented) is not None for e in EXAMPLES) >= 8


@pytest.mark.anyio
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
async def test_readme_example_is_what_the_server_answers(client: httpx.AsyncClient, example: Example) -> None:
    if example.method == "GET":
        r = await client.get(example.path)
    elif example.form is not None:
        r = await client.post(example.path, data=example.form)
    else:
        r = await client.post(example.path, json=example.json_body)
    parsed = parse_documented(example.documented)
    if parsed is None:  # prose, a file or nothing documented: it works
        assert r.status_code == 200, r.text
        if example.output:
            assert r.content
        return
    documented, status = parsed
    assert r.status_code == status, r.text
    assert not (diff := mismatches(documented, r.json())), f"README.md line {example.line}:\n" + "\n".join(
        diff
    )


def test_the_comparison_catches_what_issue_35_saw() -> None:
    """Other text or another score than documented fails; rounding, abridged keys and [...] do not."""
    parsed = parse_documented('{"results": [{"translation": "he has gone", "score": -0.965}], "maps": [...]}')
    assert parsed is not None
    documented, status = parsed
    assert status == 200
    same = {
        "results": [{"translation": "he has gone", "score": -0.96512, "model": "m"}],
        "maps": [[1]],
        "x": 1,
    }
    assert mismatches(documented, same) == []
    wrong = {"results": [{"translation": "it went", "score": -0.410}], "maps": []}
    assert len(mismatches(documented, wrong)) == 2
    assert mismatches(documented, {"results": [], "maps": []}) == ["$.results: documented 1 items, real []"]
    assert parse_documented('{"detail": "x"}   (422)') == ({"detail": "x"}, 422)
    assert parse_documented("Prometheus text format") is None
