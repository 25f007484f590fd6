"""APP_ALLOWED_HOSTS: requests whose Host header names another host get 400 (Starlette's TrustedHostMiddleware,
with the probes exempt). Against DNS rebinding: a page on an attacker's domain that resolves to this server
sends its own Host, which is not in the list. Default "*": any host (behind a proxy that checks it).

GET /health and /ready are answered whatever the Host: Kubernetes' HTTP probes send the pod's IP.

Whatever APP_ALLOWED_HOSTS says, a request with more than one Host header is a 400, checked by the gate
before anything else (app.edge.gate.Gate._refusal).
"""

from __future__ import annotations

import json

from starlette.responses import Response
from starlette.types import Scope

from app.core.settings import ENV_PREFIX
from app.edge.connections import PROBE_PATHS


def host_of(scope: Scope) -> str:
    """The Host header without its port, lowercased ("" when absent)."""
    for name, value in scope["headers"]:
        if name == b"host":
            host = value.decode("latin-1").strip().lower()
            if host.startswith("["):  # an IPv6 literal: [::1]:8000
                return host.split("]", 1)[0] + "]"
            return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return ""


def allowed(host: str, patterns: list[str]) -> bool:
    """`host` matches an entry: exactly, or a `*.example.com` entry matches its subdomains."""
    return any(p in ("*", host) or (p.startswith("*.") and host.endswith(p[1:])) for p in patterns)


def host_refusal(scope: Scope, hosts: list[str]) -> Response | None:
    """The gate's 400 for a Host outside `hosts` (lowercase names, `*.domain` wildcards); None for a host in
    it, or a probe."""
    if scope["path"] in PROBE_PATHS or allowed(host_of(scope), hosts):
        return None
    body = json.dumps({"detail": f"invalid Host header: not one of {ENV_PREFIX}ALLOWED_HOSTS"}).encode()
    return Response(body, 400, media_type="application/json")
