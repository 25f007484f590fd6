"""The HTTP edge's settings: where the server listens and logs, who may call it (keys, CORS, Host), the
LibreTranslate routes, and how connections are bounded and shut down."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode

from app.core.settings.base import ENV_PREFIX


class ServerSettings(BaseSettings):
    """A group of Settings (app/core/settings/__init__.py), which reads it from the environment."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["text", "json"] = "text"  # json: one JSON object per line (app/core/logs.py)
    access_log: bool = False  # one log line per request (app.edge.gate.Gate), with its request id and latency
    api_key: SecretStr | None = None  # when set: Authorization: Bearer <key> or X-API-Key on model routes
    # GET /metrics takes APP_API_KEY or this key (a scrape credential that cannot run models); with only this
    # key set, /metrics alone needs it. metrics_public: /metrics needs no key (e.g. scraped by pod annotations)
    metrics_api_key: SecretStr | None = None
    metrics_public: bool = False  # after metrics_api_key: _one_way_to_open_metrics reads it
    # the admin API (/admin/models: load, reload, unload while serving) takes this key alone; unset: it is off
    # (403). APP_API_KEY does not open it: a client's key cannot take models away
    admin_api_key: SecretStr | None = None
    cors_origins: Annotated[list[str], NoDecode] = []  # comma-separated
    # Host header values served (comma-separated; "*.example.com" takes subdomains; "*" any): others get 400,
    # against DNS rebinding (app/edge/hosts.py; /health and /ready answer any Host)
    allowed_hosts: Annotated[list[str], NoDecode] = ["*"]
    # the LibreTranslate-compatible API (app/api/libretranslate/routes.py) under this path; "" = not served
    libretranslate_prefix: str = "/libretranslate"
    # its answers carry Access-Control-Allow-Origin: * as LibreTranslate's (app/edge/open_cors.py); false:
    # APP_CORS_ORIGINS, as the native routes
    libretranslate_cors: bool = True
    fast_path: bool = True  # JSON POST routes skip FastAPI's per-request machinery (app/edge/fastpath.py)
    # connections (python -m app, app/edge/connections.py): slow or idle clients are cut, one client cannot hold
    # every file descriptor
    header_timeout_s: float = Field(default=10.0, gt=0, le=3600)  # request line + headers, else 408 / close
    body_timeout_s: float = Field(default=30.0, gt=0, le=3600)  # the whole body after the headers, else 408
    # a body's average rate since its head, in bytes/s, past a grace period (Kestrel's MinRequestBodyDataRate:
    # 240 bytes/s after 5 s), else 408; 0 = none. While every connection is taken, a lagging body is closed
    # sooner to make room (app/edge/body_rate.py)
    min_body_rate: float = Field(default=240.0, ge=0)
    body_rate_grace_s: float = Field(default=5.0, gt=0, le=3600)
    # a client that half-closes (SHUT_WR) after its request still gets the answer; off: its end of input means
    # it left, so its queued work is dropped and a decoding stops (a fully closed socket looks the same)
    answer_half_closed: bool = False
    keepalive_timeout_s: float = Field(default=5.0, gt=0, le=3600)  # idle between requests, then closed
    max_header_bytes: int = Field(default=32_768, ge=1024, le=1_048_576)  # request line + headers; 431 above
    max_headers: int = Field(default=100, ge=8, le=10_000)  # header fields per request; 431 above
    # open client connections; past it the longest-waiting idle one is closed, else 503 (GET /health, /ready
    # still answered)
    max_connections: int = Field(default=2048, ge=8, le=1_000_000)
    # SIGTERM: in-flight requests finish within this, then the rest are cancelled; below the orchestrator's
    # grace period (Kubernetes 30 s minus the 5 s preStop, compose stop_grace_period 30 s)
    shutdown_timeout_s: float = Field(default=20.0, gt=0, le=3600)

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v

    @field_validator("api_key", "metrics_api_key", "admin_api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("api_key", "metrics_api_key", "admin_api_key")
    @classmethod
    def _key_can_match(cls, v: SecretStr | None) -> SecretStr | None:
        """Header values are latin-1 bytes, stripped of surrounding whitespace, without control characters:
        a key outside printable ASCII could never match. The message never shows the key."""
        key = "" if v is None else v.get_secret_value()
        if key != key.strip():
            raise ValueError("leading or trailing whitespace: no header value can carry it")
        for i, c in enumerate(key):
            if not c.isascii():
                raise ValueError(f"non-ASCII character at position {i}: send keys of printable ASCII")
            if not c.isprintable():
                raise ValueError(f"control character at position {i}: send keys of printable ASCII")
        return v

    @field_validator("metrics_public")
    @classmethod
    def _one_way_to_open_metrics(cls, v: bool, info: ValidationInfo) -> bool:
        if v and info.data.get("metrics_api_key") is not None:
            raise ValueError(f"leaves /metrics open: unset it or {ENV_PREFIX}METRICS_API_KEY")
        return v

    @field_validator("cors_origins", "allowed_hosts", mode="before")
    @classmethod
    def _split_origins(cls, v: object) -> object:
        if isinstance(v, str):
            return [o.strip() for o in v.split(",") if o.strip()]
        return v

    @field_validator("libretranslate_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        v = v.strip()
        if v and not re.fullmatch(r"(/[A-Za-z0-9._~-]+)+", v):
            raise ValueError(
                f'must be "" (off) or a path such as /libretranslate, without a trailing /, got {v!r}'
            )
        return v
