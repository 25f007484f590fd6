"""Deployment files: the image's own command serves when run outside Docker (its healthchecks and the Kubernetes
probes pass on it), the image holds what the code needs, and the manifests refer to each other. Schemas, hadolint,
`docker compose config` and `nginx -t` run in scripts/validate_deploy.sh."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from app.core.metrics import METRICS_PATH, NAMESPACE
from app.core.settings import Settings
from bench.server import free_port, stop
from tests.app.conftest import serve

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
K8S_DIR = REPO / "deploy" / "k8s"
K8S_GPU_DIR = REPO / "deploy" / "k8s-gpu"  # the GPU overlay
NGINX_CONF = REPO / "deploy" / "nginx" / "nginx.conf"
READY_TIMEOUT_S = 60.0
CONTAINER_PORT = 8000
# ENV entries that describe the image's file layout (/opt/venv); outside the image the test's interpreter stands in.
IMAGE_LAYOUT_ENV = {"PATH", "VIRTUAL_ENV"}


# ---------------------------------------------------------------------------------------------------------------------
# Dockerfile parsing


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        """The stage's ENV values in order, `$VAR` / `${VAR}` expanded against earlier ones (as Docker does)."""
        env: dict[str, str] = {}
        for args in self.args("ENV"):
            tokens = shlex.split(args)
            pairs = [t.partition("=") for t in tokens]
            if not pairs[0][1]:  # legacy `ENV KEY value with spaces`
                pairs = [(tokens[0], "=", " ".join(tokens[1:]))]
            for key, _, value in pairs:
                env[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value)
        return env

    def command(self) -> list[str]:
        """What `docker run IMAGE` executes: the last ENTRYPOINT followed by the last CMD."""

        def argv(args: str) -> list[str]:
            return json.loads(args) if args.startswith("[") else ["/bin/sh", "-c", args]

        entrypoint = self.args("ENTRYPOINT")
        cmd = self.args("CMD")
        return (argv(entrypoint[-1]) if entrypoint else []) + (argv(cmd[-1]) if cmd else [])

    def healthcheck(self) -> list[str]:
        (args,) = self.args("HEALTHCHECK")
        match = re.fullmatch(r"(?:--\S+\s+)*CMD\s+(.+)", args)
        assert match, f"HEALTHCHECK without CMD: {args}"
        return json.loads(match.group(1))


def parse_dockerfile(path: Path = DOCKERFILE) -> list[Stage]:
    """The build stages, each with its (KEYWORD, arguments) instructions; comments dropped, continuations joined."""
    stages: list[Stage] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        pending = ""
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name))
        elif stages:
            stages[-1].instructions.append((keyword, args))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile()


@pytest.fixture(scope="module")
def final_stage(stages: list[Stage]) -> Stage:
    return stages[-1]


# ---------------------------------------------------------------------------------------------------------------------
# The image's command, run outside Docker


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    env: dict[str, str]
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-4000:]


@pytest.fixture(scope="module")
def image_server(
    final_stage: Stage, two_models_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The Dockerfile's final CMD with its ENV, from the repo root (the image's WORKDIR /app holds the same tree),
    on 127.0.0.1 and a free port; `python` is this interpreter (the image's is /opt/venv's)."""
    argv = final_stage.command()
    assert argv[:1] in (["python"], ["python3"]), f"image command is not a python command: {argv}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    env |= {k: v for k, v in final_stage.env().items() if k not in IMAGE_LAYOUT_ENV}
    port = free_port()
    env |= {
        "APP_HOST": "127.0.0.1",
        "APP_PORT": str(port),
        "APP_CHECKPOINT_DIR": str(two_models_dir),
        "OMP_NUM_THREADS": "1",
    }
    log = tmp_path_factory.mktemp("image-server") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *argv[1:]], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    server = Server(proc=proc, url=f"http://127.0.0.1:{port}", env=env, log=log)
    try:
        yield server
    finally:
        stop(proc, timeout=15)


def _wait_ready(server: Server, timeout_s: float = READY_TIMEOUT_S) -> int | None:
    """Poll GET /ready until 200; the last status seen (None: never answered)."""
    deadline = time.monotonic() + timeout_s
    status = None
    with httpx.Client(base_url=server.url, timeout=2.0) as client:
        while time.monotonic() < deadline and server.proc.poll() is None:
            try:
                status = client.get("/ready").status_code
            except httpx.TransportError:
                status = None
            if status == 200:
                return status
            time.sleep(0.25)
    return status


@pytest.fixture(scope="module")
def ready_server(image_server: Server) -> Server:
    status = _wait_ready(image_server)
    assert status == 200, (
        f"GET /ready did not return 200 within {READY_TIMEOUT_S:.0f} s (last: {status}, "
        f"exit code: {image_server.proc.poll()}); server output:\n{image_server.output()}"
    )
    return image_server


@pytest.mark.slow
def test_image_command_becomes_ready(ready_server: Server) -> None:
    assert httpx.get(f"{ready_server.url}/ready", timeout=5).status_code == 200


@pytest.mark.slow
def test_image_command_serves_sentiment(ready_server: Server) -> None:
    r = httpx.post(
        f"{ready_server.url}/sentiment", json={"texts": ["I loved it.", "Dull and far too long."]}, timeout=30
    )
    assert r.status_code == 200, r.text


@pytest.mark.slow
def test_dockerfile_healthcheck_passes_on_ready_server(final_stage: Stage, ready_server: Server) -> None:
    argv = final_stage.healthcheck()
    assert argv[0] == "python"
    done = subprocess.run([sys.executable, *argv[1:]], env=ready_server.env, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.slow
def test_compose_healthcheck_passes_on_ready_server(ready_server: Server) -> None:
    """The compose healthcheck targets the container port 8000: point it at the test server's port instead."""
    test = compose("docker-compose.yml")["services"]["api"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    argv = [
        sys.executable,
        *(a.replace(f":{CONTAINER_PORT}/", f":{ready_server.env['APP_PORT']}/") for a in test[2:]),
    ]
    done = subprocess.run(argv, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()


def test_healthcheck_fails_without_server(final_stage: Stage) -> None:
    argv = final_stage.healthcheck()
    env = {**os.environ, "APP_PORT": str(free_port())}
    done = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30)
    assert done.returncode != 0


@pytest.mark.slow
def test_k8s_probes_answer_on_the_image_server(container: dict[str, Any], ready_server: Server) -> None:
    """Every probe asks a real route on the port the app listens on; readiness waits for the models (/ready),
    liveness only for the process (/health: a pod still loading its models is not restarted)."""
    (port,) = container["ports"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["APP_HOST"], env["APP_PORT"]) == ("0.0.0.0", str(port["containerPort"]))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["port"] in (port["name"], port["containerPort"]), probe
        assert httpx.get(ready_server.url + get["path"], timeout=5).status_code == 200, probe
    paths = (container["readinessProbe"]["httpGet"]["path"], container["livenessProbe"]["httpGet"]["path"])
    assert paths == ("/ready", "/health")


@pytest.mark.slow
def test_image_command_stops_on_sigterm(ready_server: Server) -> None:
    """`docker stop` and Kubernetes send SIGTERM: the server must exit by itself (runs last: it ends the server)."""
    ready_server.proc.send_signal(signal.SIGTERM)
    try:
        code = ready_server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 15 s after SIGTERM; output:\n{ready_server.output()}")
    # uvicorn shuts down gracefully, then re-raises the signal (exit status 143 in a container).
    assert code in (0, -signal.SIGTERM), ready_server.output()


# ---------------------------------------------------------------------------------------------------------------------
# Dockerfile


def _dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def test_dockerignore_allows_every_copied_path(stages: list[Stage]) -> None:
    allowed = [p[1:].rstrip("/") for p in _dockerignore_patterns() if p.startswith("!")]
    sources = [
        src.rstrip("/")
        for stage in stages
        for copy in stage.args("COPY")
        if not copy.startswith("--from=")
        for src in shlex.split(copy)[:-1]
        if not src.startswith("--")
    ]
    assert [s for s in sources if not any(s == a or s.startswith(a + "/") for a in allowed)] == []


def _runtime_distributions() -> set[str]:
    """pyproject's [project].dependencies (what the image installs) and everything they pull in, installed here."""
    pending = [
        Requirement(r)
        for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    ]
    seen: set[str] = set()
    while pending:
        req = pending.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(req.name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        extras = {"", *req.extras}
        for r in map(Requirement, requires):
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras):
                pending.append(r)
    return seen


def _third_party_imports(*packages: str) -> dict[str, set[str]]:
    """Top-level modules imported anywhere (lazy imports included) in the given packages -> the importing files."""
    first_party = {"app", "model", "engines", "training"}
    found: dict[str, set[str]] = {}
    for package in packages:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {n.partition(".")[0] for n in names} - first_party - set(sys.stdlib_module_names):
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


# Optional engines: module -> the pyproject extra that installs it. Imported only when selected (a setting), so
# the image without them serves; test_serving_code_imports_without_the_optional_engines checks that.
OPTIONAL_MODULES = {"ctranslate2": "ctranslate2"}


def test_image_dependencies_cover_the_serving_code_imports() -> None:
    """The image installs only [project].dependencies: every module app/ and model/ import (lazily too) must come
    from them, or the image fails where this dev venv (with the train/test extras) does not. Optional engines
    come from their extra."""
    distributions = importlib.metadata.packages_distributions()
    runtime = _runtime_distributions()
    missing = {
        module: sorted(files)
        for module, files in _third_party_imports("app", "model", "engines").items()
        if not {canonicalize_name(d) for d in distributions.get(module, [module])} & runtime
    }
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, extra in OPTIONAL_MODULES.items():
        assert any(Requirement(r).name == module for r in extras[extra]), (module, extras[extra])
        missing.pop(module, None)
    assert missing == {}, f"imported but not in pyproject's [project].dependencies: {missing}"


def test_serving_code_imports_without_the_optional_engines() -> None:
    """Every app/ and model/ module imports with the optional engines missing (as in the image)."""
    modules = sorted(
        ".".join(p.relative_to(REPO).with_suffix("").parts)
        for package in ("app", "model", "engines")
        for p in (REPO / package).rglob("*.py")
        if p.name != "__main__.py"
    )
    code = "; ".join(
        [*(f"sys.modules[{m!r}] = None" for m in OPTIONAL_MODULES), *(f"import {m}" for m in modules)]
    )
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; {code}"], cwd=REPO, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]


# ---------------------------------------------------------------------------------------------------------------------
# Compose


class ComposeLoader(yaml.SafeLoader):
    """PyYAML plus compose's merge tags (`!reset`, `!override`), read as their plain values."""


def _tagged(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    return loader.construct_scalar(node)


for _tag in ("!reset", "!override"):
    ComposeLoader.add_constructor(_tag, _tagged)


def compose(name: str) -> dict[str, Any]:
    return yaml.load((REPO / name).read_text(encoding="utf-8"), Loader=ComposeLoader)


# ---------------------------------------------------------------------------------------------------------------------
# Kubernetes


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict[str, Any]]:
    """The kustomization's resources by kind."""
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    docs = [
        doc
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((K8S_DIR / name).read_text())
        if doc
    ]
    by_kind = {doc["kind"]: doc for doc in docs}
    assert len(by_kind) == len(docs), "one resource per kind expected"
    return by_kind


@pytest.fixture(scope="module")
def container(k8s: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (c,) = k8s["Deployment"]["spec"]["template"]["spec"]["containers"]
    return c


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    on_disk = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(on_disk)


def test_k8s_service_selects_the_pods(k8s: dict[str, dict[str, Any]]) -> None:
    pod_labels = k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    selector = k8s["Service"]["spec"]["selector"]
    assert selector.items() <= pod_labels.items()


def test_k8s_service_targets_the_container_port(
    k8s: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    (port,) = k8s["Service"]["spec"]["ports"]
    assert port["targetPort"] in {container["ports"][0]["name"], CONTAINER_PORT}


def test_k8s_hpa_targets_the_deployment(k8s: dict[str, dict[str, Any]]) -> None:
    target = k8s["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        "apps/v1",
        "Deployment",
        k8s["Deployment"]["metadata"]["name"],
    )


def test_k8s_pdb_selects_the_pods(k8s: dict[str, dict[str, Any]]) -> None:
    pod_labels = k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert k8s["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_k8s_replicas_are_left_to_the_hpa(k8s: dict[str, dict[str, Any]]) -> None:
    """A fixed spec.replicas beside an HPA would reset the HPA's count on every `kubectl apply`."""
    assert "replicas" not in k8s["Deployment"]["spec"]


def app_settings(container: dict[str, Any]) -> dict[str, str]:
    """The container's literal APP_* values as Settings fields (secrets left out); every one must be a setting."""
    env = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("APP_") and "value" in e}
    fields = {name.removeprefix("APP_").lower(): value for name, value in env.items()}
    assert set(fields) <= set(Settings.model_fields), "unknown APP_ settings"
    Settings(**fields)  # valid values
    return fields


@pytest.mark.anyio
async def test_k8s_prometheus_scrapes_the_pods_with_an_api_key_set(
    k8s: dict[str, dict[str, Any]], container: dict[str, Any], two_models_dir: Path
) -> None:
    """The prometheus.io annotations send no credentials: with the pod's settings and the secret's APP_API_KEY,
    the annotated path answers without a key while the model routes need it."""
    annotations = k8s["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == METRICS_PATH
    assert annotations["prometheus.io/port"] == str(container["ports"][0]["containerPort"])
    env = app_settings(container) | {"checkpoint_dir": str(two_models_dir), "api_key": "from-the-secret"}
    async with serve(Settings(**env), ready=False) as (_, client):
        assert (await client.get("/models")).status_code == 401
        scrape = await client.get(annotations["prometheus.io/path"])
        assert scrape.status_code == 200
        assert f"{NAMESPACE}_build_info" in scrape.text


@pytest.fixture(scope="module")
def gpu_overlay() -> dict[str, Any]:
    return yaml.safe_load((K8S_GPU_DIR / "kustomization.yaml").read_text())


def test_k8s_gpu_overlay_patches_the_base_with_the_compose_cuda_image(gpu_overlay: dict[str, Any]) -> None:
    assert gpu_overlay["resources"] == ["../k8s"]
    on_disk = {p.name for p in K8S_GPU_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(p["path"] for p in gpu_overlay["patches"]) == sorted(on_disk)
    name, tag = compose("docker-compose.gpu.yml")["services"]["api"]["image"].rsplit(":", 1)
    assert [(i["name"], i["newTag"]) for i in gpu_overlay["images"]] == [(name, tag)]


@pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="kubectl not installed: it renders the GPU overlay here and in scripts/validate_deploy.sh",
)
def test_k8s_gpu_overlay_renders_one_gpu_per_pod(
    k8s: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(K8S_GPU_DIR)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    gpu = {doc["kind"]: doc for doc in yaml.safe_load_all(out) if doc}
    assert set(gpu) == set(k8s)  # the same resources, patched
    deployment = gpu["Deployment"]
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    assert c["image"] == compose("docker-compose.gpu.yml")["services"]["api"]["image"]
    assert int(c["resources"]["limits"]["nvidia.com/gpu"]) == 1
    assert "replicas" not in deployment["spec"]
    assert app_settings(c) == app_settings(container) | {"device": "cuda"}  # only the device differs
    assert gpu["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]


def test_shutdown_timeout_fits_the_grace_periods(
    k8s: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    """SIGTERM comes after the preStop hook; the app must be gone before SIGKILL: its shutdown timeout (then the
    lifespan's, a few seconds at most) within Kubernetes' terminationGracePeriodSeconds and compose's grace."""
    env = {e["name"]: e.get("value") for e in container["env"]}
    timeout = float(env.get("APP_SHUTDOWN_TIMEOUT_S") or Settings.model_fields["shutdown_timeout_s"].default)
    pre_stop = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    (sleep,) = re.findall(r"sleep\((\d+(?:\.\d+)?)\)", pre_stop)
    grace = k8s["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert float(sleep) + timeout + 3 <= grace
    stop_grace = compose("docker-compose.yml")["services"]["api"]["stop_grace_period"]
    assert timeout + 3 <= float(stop_grace.removesuffix("s"))
