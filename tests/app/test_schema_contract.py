"""The OpenAPI document is the contract: schemathesis generates requests the served document calls valid,
sends them to the app in-process (ASGI, tiny checkpoints) and checks each answer: no 5xx, a documented status
and content type, a body its schema allows, and a valid request served (issue 33: the document accepted what
the server refused). Bounded and deterministic: derandomized hypothesis, EXAMPLES cases per operation. Then
issue 33's five cases, each asked of the document (jsonschema) and of the server, which must agree.

The app runs in an event loop of its own for the whole module (schemathesis ends the lifespans it starts
after each test, and a stopped service does not start again): `Bridge` hands schemathesis's requests to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from schemathesis import Case, CheckContext, Response
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.types import ASGIApp, Receive, Scope, Send

from app.core.settings import Settings
from tests.app.conftest import serve

pytestmark = pytest.mark.slow  # fuzzes every operation: not in `make test-fast`

MAX_TEXTS, MAX_CHARS = 4, 40  # not the defaults: the schema must state the settings the app runs with
MAX_TERMS, MAX_TERM = 2, 12  # glossary terms per request, characters per term
EXAMPLES = 25  # per operation: each test a few seconds on the tiny checkpoints
OPERATIONS = [
    ("GET", "/health"),
    ("GET", "/ready"),
    ("GET", "/models"),
    ("GET", "/metrics"),
    ("POST", "/sentiment"),
    ("POST", "/translate"),
    ("POST", "/translate/file"),
    ("POST", "/glossaries"),
    ("GET", "/glossaries"),
    ("GET", "/glossaries/{glossary_id}"),
    ("GET", "/glossaries/{glossary_id}/entries"),
    ("DELETE", "/glossaries/{glossary_id}"),
    ("POST", "/detect"),
    ("POST", "/attention"),
    ("POST", "/libretranslate/translate"),
    ("GET", "/admin/models"),
    ("POST", "/admin/models/{name}/load"),
    ("POST", "/admin/models/{name}/reload"),
    ("POST", "/admin/models/{name}/unload"),
    ("POST", "/libretranslate/detect"),
    ("POST", "/libretranslate/translate_file"),
    ("GET", "/libretranslate/download_file/{name}"),
    ("GET", "/libretranslate/languages"),
    ("GET", "/libretranslate/frontend/settings"),
    ("GET", "/libretranslate/health"),
    ("GET", "/libretranslate/spec"),
]


# what the test app serves (tests/app/conftest.py): a random name or code is almost always a 404, so half the
# cases take these (still valid per schema) to reach the models
SERVED = {
    "model": ["sentiment-en", "sentiment-ko", "translate-fr-en", "translate-multi"],
    "source_lang": ["fr", "de", "auto"],
    "target_lang": ["en", "fr"],
    "source": ["fr", "de", "auto"],
    "target": ["en", "fr"],
}


@st.composite
def cases(draw: st.DrawFn, operation: Any) -> Case:
    """A case of `operation`; half the time with a served model and languages in its body."""
    case = draw(operation.as_strategy())
    if isinstance(case.body, dict) and draw(st.booleans()):
        for field, values in SERVED.items():
            if field in case.body:
                if case.path == "/glossaries":  # a stored glossary is of one language, never "auto"
                    values = [v for v in values if v != "auto"]
                case.body[field] = draw(st.sampled_from(values))
    return case


class Bridge:
    """An ASGI app that runs each HTTP request on `loop`, where `app` and its lifespan live; its own lifespan
    does nothing."""

    def __init__(self, app: ASGIApp, loop: asyncio.AbstractEventLoop) -> None:
        self.app, self.loop = app, loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                step = (await receive())["type"].removeprefix("lifespan.")  # startup | shutdown
                await send({"type": f"lifespan.{step}.complete"})
                if step == "shutdown":
                    return
        here = asyncio.get_running_loop()

        def on(loop: asyncio.AbstractEventLoop, work: Any) -> asyncio.Future[Any]:
            return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop))

        async def receive_here() -> Any:
            return await on(here, receive())

        async def send_here(message: Any) -> None:
            await on(here, send(message))

        await on(self.loop, self.app(scope, receive_here, send_here))


@dataclass
class Served:
    schema: schemathesis.BaseSchema  # the app's document, its requests sent to the app
    portal: BlockingPortal  # the app's event loop
    client: httpx.AsyncClient  # in-process, in that loop

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.portal.call(partial(self.client.request, method, path, **kwargs))

    def valid(self, method: str, path: str, media: str, body: Any) -> bool:
        """Whether the document takes `body` (as `media`) for the operation."""
        document = self.schema.raw_schema
        operation = document["paths"][path][method.lower()]
        schema = operation["requestBody"]["content"][media]["schema"]
        return Draft202012Validator({**schema, "components": document["components"]}).is_valid(body)


@pytest.fixture(scope="module")
def contract(app_checkpoint_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    settings = Settings(
        checkpoint_dir=app_checkpoint_dir,
        glossary_dir=tmp_path_factory.mktemp(
            "glossaries"
        ),  # what POST /glossaries stores: this module's only
        max_texts=MAX_TEXTS,
        max_chars=MAX_CHARS,
        max_glossary_terms=MAX_TERMS,
        max_term_chars=MAX_TERM,
    )
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(serve(settings)) as (app, client),
    ):
        bridge = Bridge(app, portal.call(asyncio.get_running_loop))
        yield Served(schemathesis.openapi.from_asgi("/openapi.json", bridge), portal, client)


# refusals that depend on what is loaded, which no schema states (each is documented on its route): a model
# or language pair (404; LibreTranslate's 400 naming the language), a layer or head past the model's
# (attention), a target past its length, a target or target language the model does not take, a text "auto"
# detects in a language no model (or not the one named) translates
UNSERVED = [
    (404, ""),
    (400, " is not supported"),  # a served code that no pair of the other field's language has
    (400, " is not available as a target language from "),
    (422, " is out of range: valid range is "),
    (422, "-token limit of "),
    (422, "only translation models take a "),
    (422, "detected language '"),
    (400, "detected language '"),
    (422, " translates into "),
    # a rule no schema can state: a glossary's source terms are distinct ignoring case (and spacing)
    (422, "source terms must differ ignoring case"),
    (400, "source terms must differ ignoring case"),
    # a file's name and content, which no schema states: its format (the name's extension), a file that is
    # not of it, a download name translate_file never made
    (415, "unsupported file format"),
    (400, "Invalid request: file format not supported"),
    (400, "Invalid request: empty file"),
    (400, "the file is not "),
    (400, "Invalid filename"),
    # a stored glossary's id: one the store never made is not there (LibreTranslate: 400); and a rule the
    # document states in words only (app/schemas.py GLOSSARY_REPLACES): a glossary and a glossary_id, not both
    (400, "glossary_id: no glossary "),
    (422, r"or \"glossary_id\", not both"),  # (as the JSON text escapes it)
    # the admin API stays off here (APP_ADMIN_API_KEY unset): a fuzzer must not unload the models under test
    (403, "the admin API is off"),
    (400, r"or \"glossary_id\", not both"),
]


def accepted(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """A request the document calls valid is served (2xx), or refused for what is loaded (UNSERVED);
    anything else is a request the document should have refused (one client on a ready app: no 429 or
    503 either)."""
    status = response.status_code
    if status < 300:
        return None
    if any(status == code and words in response.text for code, words in UNSERVED):
        return None
    if status == 400 and case.media_type != JSON and "Invalid request: glossary" in response.text:
        return None  # a form's glossary is JSON text: the document's contentSchema annotates, never checks
    if status == 422 and case.media_type != JSON and "glossary" in response.text:
        return None  # the same on /translate/file (and the rule that a form gives glossary or glossary_id)
    raise AssertionError(f"a schema-valid request was refused: {status} {response.text[:300]}")


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    accepted,
]


def test_every_operation_is_checked(contract: Served) -> None:
    """OPERATIONS is the document's (the routes that take no request, e.g. LibreTranslate's suggest, are left
    out of it)."""
    served = {(op.ok().method.upper(), op.ok().path) for op in contract.schema.get_all_operations()}
    assert served == set(OPERATIONS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_the_server_keeps_the_documents_contract(contract: Served, method: str, path: str) -> None:
    operation = contract.schema[path][method]

    @hypothesis.settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases(operation))
    def check(case: Case) -> None:
        case.call_and_validate(checks=CHECKS)

    check()


LT = "/libretranslate"
JSON, FORM, MULTIPART = "application/json", "application/x-www-form-urlencoded", "multipart/form-data"
FR = {"source_lang": "fr", "target_lang": "en"}


@pytest.mark.parametrize(
    ("path", "media", "body", "status"),
    [
        ("/detect", JSON, {"text": "0"}, 200),  # no letters: language "und"
        ("/detect", JSON, {"texts": ["Bonjour.", "42 !"]}, 200),
        (f"{LT}/detect", MULTIPART, {"q": ""}, 400),  # a missing q
        (f"{LT}/translate", MULTIPART, {"q": "", "source": "fr", "target": "en"}, 400),
        (f"{LT}/translate", FORM, {"q": "", "source": "fr", "target": "en"}, 400),
        (f"{LT}/translate", JSON, {"q": [], "source": "fr", "target": "en"}, 400),
        (f"{LT}/translate", JSON, {"q": ["", "Bonjour."], "source": "fr", "target": "en"}, 200),
        (f"{LT}/translate", JSON, {"q": "Bonjour.", "source": " ", "target": "en"}, 400),
        (f"{LT}/translate", JSON, {"q": "Bonjour.", "source": "fr", "target": "en", "alternatives": 16}, 400),
        ("/translate", JSON, {"text": "Bonjour.", **FR, "num_hypotheses": 5, "beam_size": 2}, 422),
        ("/translate", JSON, {"text": "Bonjour.", **FR, "num_hypotheses": 5}, 422),  # beam_size 4
        ("/translate", JSON, {"text": "Bonjour.", **FR, "num_hypotheses": 4}, 200),
        ("/translate", JSON, {"text": "Bonjour.", **FR, "num_hypotheses": 2.0, "beam_size": 2.0}, 200),
        ("/translate", JSON, {"text": "Bonjour.", **FR, "length_penalty": 0.33}, 422),
        ("/translate", JSON, {"texts": ["Bonjour."] * (MAX_TEXTS + 1), **FR}, 422),  # APP_MAX_TEXTS
        ("/translate", JSON, {"texts": ["Bonjour."] * MAX_TEXTS, **FR}, 200),
        ("/translate", JSON, {"text": "Bonjour.", **FR, "glossary": {"bonjour": "Hi"}}, 200),
        (
            "/translate",
            JSON,
            {"text": "Bonjour.", **FR, "glossary": {"a": "b"}, "replace_unknowns": False},
            422,
        ),
        ("/translate", JSON, {"text": "Bonjour.", **FR, "glossary": {}, "replace_unknowns": False}, 200),
        (
            "/translate",
            JSON,
            {"text": "Bonjour.", **FR, "glossary_id": "x" * 43, "replace_unknowns": False},
            422,
        ),
        ("/translate", JSON, {"text": "Bonjour.", **FR, "glossary": {"b": "x" * (MAX_TERM + 1)}}, 422),
        ("/translate", JSON, {"text": "Bonjour.", **FR, "glossary": {str(k): "x" for k in range(3)}}, 422),
        (
            f"{LT}/translate",
            JSON,
            {"q": "Bonjour.", "source": "fr", "target": "en", "glossary": {"a": "b"}},
            200,
        ),
        ("/sentiment", JSON, {"text": "a" * (MAX_CHARS + 1)}, 422),  # APP_MAX_CHARS
        ("/sentiment", JSON, {"text": "\u200b\x95"}, 422),  # only characters no model reads
        (f"{LT}/detect", JSON, {"q": ["Bonjour."] * (MAX_TEXTS + 1)}, 400),
    ],
)
def test_the_document_and_the_server_agree(
    contract: Served, path: str, media: str, body: dict[str, Any], status: int
) -> None:
    """Issue 33's five cases (and their neighbours): what the document takes, the server serves."""
    if media == JSON:
        r = contract.request("POST", path, json=body)
    else:  # a form: a list is a repeated field
        fields = [(k, v) for k, vs in body.items() for v in (vs if isinstance(vs, list) else [vs])]
        files = [(k, (None, v)) for k, v in fields] if media == MULTIPART else None
        r = contract.request("POST", path, data=None if files else dict(fields), files=files)
    assert r.status_code == status, r.text
    assert contract.valid("POST", path, media, body) == (status == 200)


def test_routes_that_take_no_request_are_not_in_the_document(contract: Served) -> None:
    """LibreTranslate's suggestion route answers every request 403 (the feature is off), so the document,
    where some request would be valid, leaves it out (issue 33)."""
    paths = contract.schema.raw_schema["paths"]
    for method, path, template, status in [
        ("POST", f"{LT}/suggest", f"{LT}/suggest", 403),
    ]:
        assert contract.request(method, path).status_code == status
        assert template not in paths


def test_the_limits_are_the_settings(contract: Served) -> None:
    """APP_MAX_TEXTS and APP_MAX_CHARS as the app runs with them, named in the document."""
    schemas = contract.schema.raw_schema["components"]["schemas"]
    texts = next(
        b for b in schemas["TranslateRequest"]["properties"]["texts"]["anyOf"] if b["type"] == "array"
    )
    assert (texts["maxItems"], texts["items"]["maxLength"]) == (MAX_TEXTS, MAX_CHARS)
    assert texts["x-limit"] == {"maxItems": "APP_MAX_TEXTS"}
    glossary = next(
        b for b in schemas["TranslateRequest"]["properties"]["glossary"]["anyOf"] if b["type"] == "object"
    )
    assert (glossary["maxProperties"], glossary["propertyNames"]["maxLength"]) == (MAX_TERMS, MAX_TERM)
    assert glossary["additionalProperties"]["maxLength"] == MAX_TERM
    lt = contract.request("GET", f"{LT}/spec").json()["paths"][f"{LT}/translate"]["post"]
    q = lt["requestBody"]["content"][JSON]["schema"]["properties"]["q"]["anyOf"]
    assert [b.get("maxLength", b.get("maxItems")) for b in q] == [MAX_CHARS, MAX_TEXTS]


def test_the_libretranslate_codes_are_the_served_ones(contract: Served) -> None:
    """Issue 43: source "0" was a 400 ("0 is not supported") while the document allowed any string. The
    document now states the codes the models serve, in any case (LibreTranslate lowercases them)."""
    import re

    body = contract.schema.raw_schema["paths"][f"{LT}/translate"]["post"]["requestBody"]["content"]
    for media in body.values():
        fields = media["schema"]["properties"]
        source, target = re.compile(fields["source"]["pattern"]), re.compile(fields["target"]["pattern"])
        for code in ("fr", "EN", " en ", "auto", "Auto"):
            assert source.search(code), code
        for code in ("0", "zz", "", "fren", "auto fr"):
            assert not source.search(code), code
        assert target.search("en")
        assert not target.search("auto")
        assert not target.search("0")
    for code, status in (("0", 400), ("FR", 200), ("zz", 400)):
        r = contract.request("POST", f"{LT}/translate", json={"q": "Bonjour", "source": code, "target": "en"})
        assert r.status_code == status, (code, r.text)
