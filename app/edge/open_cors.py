"""CORS as LibreTranslate sends it, for its API's prefix: every answer carries `Access-Control-Allow-Origin: *`
and the rest of LibreTranslate's headers (its Flask app adds them after every request, asked by an Origin or
not), and a preflight (OPTIONS) is answered here. Browser clients of LibreTranslate (web pages, extensions)
call any server from any origin and rely on it. APP_LIBRETRANSLATE_CORS=false leaves these paths to
APP_CORS_ORIGINS, as the native routes."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# LibreTranslate's, plus X-API-Key and X-Request-ID (ours) and Retry-After (our 429s); no credentials: a
# browser refuses them with "*", and the key travels in the body or a header
HEADERS = [
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-headers", b"Authorization, Content-Type, X-API-Key, X-Request-ID"),
    (b"access-control-expose-headers", b"Authorization, X-Request-ID, Retry-After"),
    (b"access-control-allow-methods", b"GET, POST"),
    (b"access-control-max-age", str(60 * 60 * 24 * 20).encode()),  # LibreTranslate's 20 days
]
_NAMES = {name for name, _ in HEADERS}


class OpenCors:
    """Wraps `app` for the paths it is given: LibreTranslate's CORS headers on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] == "OPTIONS":  # a preflight (or a bare OPTIONS): allowed, nothing to route
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [*HEADERS, (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", ()) if k.lower() not in _NAMES]
                message["headers"] = [*kept, *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)
