#!/usr/bin/env bash
# Installs Debian's `chromium` (/usr/bin/chromium) for the browser tests in tests/e2e (Playwright drives it; the
# `playwright` pip package comes with the `test` extra). Idempotent: a second run installs nothing. Never runs
# `playwright install` (that downloads browsers from a CDN).
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    echo "chromium: $("$CHROMIUM" --version 2>/dev/null || echo "present at $CHROMIUM")"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: no apt-get; install chromium at $CHROMIUM by other means" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_browser: apt-get needs root (or sudo)" >&2
        exit 1
    fi
fi

apt_install() {
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}
# apt-get update only when the package lists are missing or stale (the first install attempt fails then).
if ! apt_install 2>/dev/null; then
    $SUDO apt-get update -qq
    apt_install
fi
echo "chromium: $("$CHROMIUM" --version 2>/dev/null)"
