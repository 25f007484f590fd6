#!/usr/bin/env bash
# Writes requirements.lock, what the Docker image installs besides torch: [project].dependencies and torch's own
# requirements, each pinned with the sha256 of every file of that release. It is resolved as the image resolves
# it: with the Dockerfile's Python (BASE_IMAGE python:X.Y-slim), on Linux x86_64, against the CPU torch
# (TORCH_VERSION+cpu from the Dockerfile's TORCH_INDEX_URL), so no nvidia-* package gets in. torch itself stays out
# (the Dockerfile installs it from its own index).
#
#   make lock              after a change to [project].dependencies: adds and drops, keeps the other pins
#   make lock UPGRADE=1    moves every pin to the newest release allowed
#
# Runs pip-tools (pinned below) in a throw-away venv made with $PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
UPGRADE=${UPGRADE:-}
PIP_VERSION=25.3
PIP_TOOLS_VERSION=7.6.2
OUT=requirements.lock

dockerfile_arg() {  # NAME: the default of `ARG NAME=...` in the Dockerfile
    sed -n "s/^ARG $1=//p" Dockerfile | head -n1
}
TORCH_VERSION=$(dockerfile_arg TORCH_VERSION)
TORCH_INDEX_URL=$(dockerfile_arg TORCH_INDEX_URL)
IMAGE_PYTHON=$(dockerfile_arg BASE_IMAGE | sed -n 's/^python:\([0-9]*\.[0-9]*\)-.*/\1/p')

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    echo "lock: resolve on Linux x86_64, as the image does (this is $(uname -s)-$(uname -m))" >&2
    exit 1
fi
python_version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -z "$IMAGE_PYTHON" ] || [ "$python_version" != "$IMAGE_PYTHON" ]; then
    echo "lock: the image runs Python ${IMAGE_PYTHON:-?} (Dockerfile BASE_IMAGE), $PYTHON is $python_version:" \
        "PYTHON=python${IMAGE_PYTHON} bash scripts/lock.sh" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "pip==${PIP_VERSION}" "pip-tools==${PIP_TOOLS_VERSION}"

echo "torch==${TORCH_VERSION}+cpu" >"$tmp/torch-cpu.txt"
args=(
    --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links
    --constraint "$tmp/torch-cpu.txt"
    --unsafe-package torch  # resolved (its requirements are locked) but written as a comment only
    --output-file "$OUT"
)
if [ -n "$UPGRADE" ]; then
    args+=(--upgrade)
fi
# The CPU index only when it answers (here pip's own sources may hold the CPU wheel); pip would retry it per package.
if timeout 15 "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=10)' \
    "$TORCH_INDEX_URL" >/dev/null 2>&1; then
    args+=(--extra-index-url "$TORCH_INDEX_URL")
else
    echo "lock: ${TORCH_INDEX_URL} is unreachable: torch ${TORCH_VERSION}+cpu must come from pip's own sources" >&2
fi

status=0
CUSTOM_COMPILE_COMMAND="make lock" "$tmp/venv/bin/python" -m piptools compile "${args[@]}" pyproject.toml \
    2>"$tmp/log" || status=$?
# pip-compile ends the file with a warning that torch is not pinned: say instead where it comes from.
grep -v '^The generated requirements file may be rejected' "$tmp/log" >&2 || true
[ "$status" = 0 ] || exit "$status"
sed -i -e '/^# WARNING: The following packages were not pinned/,$d' "$OUT"
sed -i -e '${/^$/d}' "$OUT"
cat >>"$OUT" <<EOF

# Not here: torch==${TORCH_VERSION}, which the Dockerfile installs first from TORCH_INDEX_URL (the CPU index by
# default). The packages above include its requirements.
EOF
echo "lock: wrote $OUT ($(grep -c '^[a-z0-9]' "$OUT") packages)"
