#!/usr/bin/env bash
# Validates the deployment files without a Docker engine or a cluster (tools: scripts/install_ci_tools.sh):
#   hadolint on the Dockerfile (any finding fails), `docker compose config` on every compose file combination,
#   the Kubernetes manifests against their JSON schemas (strict), and `nginx -t` on the load-balancer config.
# Runs every check, then exits 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python}
K8S_VERSIONS=${K8S_VERSIONS:-"1.30.0 1.37.0"}  # oldest and newest Kubernetes minors checked
# Tools that pip put next to the interpreter are found even when that directory is not on PATH.
PATH="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

failed=()
check() {  # NAME COMMAND...: run one check, record a failure
    local name=$1
    shift
    echo "--- ${name}"
    if "$@" 2>&1; then
        echo "ok: ${name}"
    else
        echo "FAILED: ${name}"
        failed+=("$name")
    fi
}
missing() {  # TOOL: a required validator is absent
    echo "--- $1"
    echo "FAILED: $1 is not installed (run scripts/install_ci_tools.sh)"
    failed+=("$1")
}

# --- Dockerfile ---
if command -v hadolint >/dev/null 2>&1; then
    check "hadolint $(hadolint --version | grep -o '[0-9][0-9.]*' | head -n1) Dockerfile" hadolint Dockerfile
else
    missing hadolint
fi

# --- compose: base, GPU, scale-out, scale-out on GPUs ---
compose=()
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1 && docker-compose version --short 2>/dev/null | grep -q '^2\.'; then
    compose=(docker-compose)  # v2 only: v1 (1.29) knows neither `!reset` nor the newer compose-spec fields
fi
compose_config() {  # FILES...: the merged model must be valid; scale-out: no api host port, 3 replicas, nginx
    local args=() f
    for f in "$@"; do args+=(-f "$f"); done
    "${compose[@]}" "${args[@]}" config --quiet || return 1
    case " $* " in
        *" docker-compose.scale.yml "*)
            "${compose[@]}" "${args[@]}" config --format json | "$PYTHON" -c '
import json, sys
services = json.load(sys.stdin)["services"]
api, nginx = services["api"], services["nginx"]
errors = []
if api.get("ports"):
    errors.append("api still publishes a host port: %s" % api["ports"])
if api.get("deploy", {}).get("replicas", 1) < 2:
    errors.append("api has fewer than 2 replicas")
if nginx.get("depends_on", {}).get("api", {}).get("condition") != "service_healthy":
    errors.append("nginx does not wait for a healthy api")
for e in errors:
    print("scale-out:", e)
sys.exit(1 if errors else 0)
' || return 1
            ;;
    esac
}
if [ ${#compose[@]} -gt 0 ]; then
    echo "(compose: $("${compose[@]}" version --short))"
    check "compose config: docker-compose.yml" compose_config docker-compose.yml
    check "compose config: + docker-compose.gpu.yml" compose_config docker-compose.yml docker-compose.gpu.yml
    check "compose config: + docker-compose.scale.yml" compose_config docker-compose.yml docker-compose.scale.yml
    check "compose config: + scale + gpu" compose_config docker-compose.yml docker-compose.scale.yml docker-compose.gpu.yml
else
    missing "docker compose v2"
fi

# --- Kubernetes: every manifest kustomization.yaml lists (and, with kubectl, the kustomize output of it and of
# the GPU overlay deploy/k8s-gpu) ---
k8s_validate() {  # FILES...
    local v args=()
    for v in $K8S_VERSIONS; do args+=(-k "$v"); done
    "$PYTHON" -m kubernetes_validate --strict --quiet "${args[@]}" "$@"
}
kustomize_validate() {  # DIR
    local out
    out=$(mktemp --suffix=.yaml)
    kubectl kustomize "$1" >"$out" && k8s_validate "$out"
    local rc=$?
    rm -f "$out"
    return $rc
}
if "$PYTHON" -c 'import kubernetes_validate' 2>/dev/null; then
    mapfile -t manifests < <("$PYTHON" -c '
import yaml
for name in yaml.safe_load(open("deploy/k8s/kustomization.yaml"))["resources"]:
    print("deploy/k8s/" + name)
')
    if [ ${#manifests[@]} -gt 0 ]; then
        check "kubernetes-validate (${K8S_VERSIONS// /, }): ${manifests[*]}" k8s_validate "${manifests[@]}"
    else
        missing "deploy/k8s/kustomization.yaml resources"
    fi
    if command -v kubectl >/dev/null 2>&1; then
        for dir in deploy/k8s deploy/k8s-gpu; do
            check "kubectl kustomize ${dir} | kubernetes-validate" kustomize_validate "$dir"
        done
    else
        echo "--- kubectl kustomize deploy/k8s deploy/k8s-gpu: skipped (kubectl not installed)"
    fi
else
    missing kubernetes-validate
fi

# --- nginx: the config with `api` pointed at loopback (the name only resolves on the compose network) ---
nginx_test() {
    local dir rc
    dir=$(mktemp -d)
    sed 's/server api:8000/server 127.0.0.1:8000/' deploy/nginx/nginx.conf >"${dir}/nginx.conf"
    grep -q 'server 127.0.0.1:8000' "${dir}/nginx.conf" || { echo "no 'server api:8000' line"; rm -rf "$dir"; return 1; }
    nginx -t -q -p "$dir" -e stderr -c "${dir}/nginx.conf"
    rc=$?
    rm -rf "$dir"
    return $rc
}
if command -v nginx >/dev/null 2>&1; then
    check "$(nginx -v 2>&1 | sed 's/^nginx version: //') -t deploy/nginx/nginx.conf" nginx_test
else
    echo "--- nginx -t: skipped (nginx not installed; scripts/install_ci_tools.sh installs it from apt)"
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
    echo "validate_deploy: ${#failed[@]} check(s) failed:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
echo "validate_deploy: all checks passed"
