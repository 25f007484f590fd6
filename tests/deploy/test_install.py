"""What `make install` and the Docker image install: scripts/install_torch.sh run with pip's `--dry-run --report`
against a fake package index on 127.0.0.1 (tiny fixture wheels; pip's own configuration shut out), so the choice of
torch build and index is checked offline; the Makefile's wiring and Python check; requirements.lock against
pyproject.toml and the Dockerfile."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import socket
import subprocess
import sys
import threading
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install_torch.sh"
LOCK = REPO / "requirements.lock"
# index -> project -> [(version, Requires-Dist)]: PyPI's Linux torch pulls nvidia-* wheels, the CPU index's does not;
# newer releases on both check that the version pin holds.
INDEXES = {
    "pypi": {
        "torch": [("2.13.0", ["filelock", "nvidia-cublas==13.0.0"]), ("2.15.0", ["filelock"])],
        "nvidia-cublas": [("13.0.0", [])],
        "filelock": [("3.20.0", [])],
    },
    "cpu": {"torch": [("2.13.0+cpu", ["filelock"]), ("2.15.0+cpu", ["filelock"])]},
}
GPU_LIST = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-00000000-0000-0000-0000-000000000000)"


def write_wheel(project_dir: Path, name: str, version: str, requires: list[str]) -> None:
    """A minimal pure-Python wheel: METADATA (name, version, requirements), WHEEL and RECORD."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}.dist-info/RECORD"] = "".join(
        f"{path},,\n" for path in [*files, f"{dist}.dist-info/RECORD"]
    )
    project_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(project_dir / f"{dist}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


@dataclass
class FakeIndexes:
    url: str  # http://127.0.0.1:PORT; INDEXES[name] is served at {url}/{name}/
    requests: list[str]  # paths asked for, in order


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeIndexes]:
    """PEP 503 simple indexes: http.server's directory listings are pages of <a href="wheel"> links."""
    root = tmp_path_factory.mktemp("indexes")
    for index, projects in INDEXES.items():
        for project, releases in projects.items():
            for version, requires in releases:
                write_wheel(root / index / project, project, version, requires)
    requests: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            requests.append(self.path)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeIndexes(f"http://127.0.0.1:{httpd.server_address[1]}", requests)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a CPU index behind a black-holing network)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Plan:
    returncode: int
    log: str  # the script's and pip's stderr
    install: dict[str, tuple[str, str]]  # name -> (version, the URL pip would download it from)

    def torch(self) -> tuple[str, str]:
        """torch's version and the index it comes from."""
        version, url = self.install["torch"]
        return version, url.rsplit("/torch/", 1)[0] + "/"


def plan(
    indexes: FakeIndexes, tmp_path: Path, cpu_index_url: str | None = None, gpu: bool = False, **env: str
) -> Plan:
    """Run install_torch.sh as `make install` does, with pip in --dry-run --report mode; what would it install?"""
    nvidia_smi = tmp_path / "nvidia-smi"
    if gpu:
        nvidia_smi.write_text(f"#!/bin/sh\necho '{GPU_LIST}'\n")
        nvidia_smi.chmod(0o755)
    report = tmp_path / "report.json"
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "TORCH_")) and "proxy" not in k.lower()
    }
    result = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)],
        env=clean
        | {
            "PYTHON": sys.executable,
            "PIP_CONFIG_FILE": os.devnull,  # none of this machine's pip.conf (find-links, extra indexes)
            "PIP_INDEX_URL": f"{indexes.url}/pypi/",
            "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_RETRIES": "0",
            "TORCH_CPU_INDEX_URL": cpu_index_url or f"{indexes.url}/cpu/",
            "NVIDIA_SMI": str(nvidia_smi),
        }
        | env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    install = {}
    if report.exists():
        for item in json.loads(report.read_text())["install"]:
            install[item["metadata"]["name"]] = (item["metadata"]["version"], item["download_info"]["url"])
    return Plan(result.returncode, result.stderr, install)


def test_cpu_machine_gets_the_cpu_build_from_the_cpu_index(indexes: FakeIndexes, tmp_path: Path) -> None:
    p = plan(indexes, tmp_path)
    assert p.returncode == 0, p.log
    assert p.torch() == ("2.13.0+cpu", f"{indexes.url}/cpu/")
    assert p.install["filelock"][1].startswith(f"{indexes.url}/pypi/")  # dependencies from pip's own index
    assert [name for name in p.install if name.startswith("nvidia")] == []


@pytest.mark.parametrize("port_kind", ["closed", "silent"])
def test_unreachable_cpu_index_falls_back_to_the_default_index(
    indexes: FakeIndexes, tmp_path: Path, port_kind: str, request: pytest.FixtureRequest
) -> None:
    port = request.getfixturevalue(f"{port_kind}_port")
    p = plan(indexes, tmp_path, cpu_index_url=f"http://127.0.0.1:{port}/cpu/", TORCH_INDEX_TIMEOUT="1")
    assert p.returncode == 0, p.log
    assert p.torch() == ("2.13.0", f"{indexes.url}/pypi/")
    assert f"WARNING: http://127.0.0.1:{port}/cpu/ is unreachable (1 s timeout)" in p.log


@pytest.mark.parametrize(("variant", "gpu"), [("auto", True), ("cuda", False)])
def test_gpu_machine_or_cuda_variant_gets_the_default_index_build(
    indexes: FakeIndexes, tmp_path: Path, variant: str, gpu: bool
) -> None:
    before = len(indexes.requests)
    p = plan(indexes, tmp_path, gpu=gpu, TORCH_VARIANT=variant)
    assert p.returncode == 0, p.log
    assert p.torch() == ("2.13.0", f"{indexes.url}/pypi/")
    assert "nvidia-cublas" in p.install
    assert [r for r in indexes.requests[before:] if r.startswith("/cpu/")] == []


def test_cpu_variant_wins_over_a_gpu(indexes: FakeIndexes, tmp_path: Path) -> None:
    p = plan(indexes, tmp_path, gpu=True, TORCH_VARIANT="cpu")
    assert (p.returncode, p.torch()[0]) == (0, "2.13.0+cpu")


def test_unknown_variant_is_refused(indexes: FakeIndexes, tmp_path: Path) -> None:
    p = plan(indexes, tmp_path, TORCH_VARIANT="rocm")
    assert (p.returncode, p.install) == (2, {})
    assert "TORCH_VARIANT must be auto, cpu or cuda, not 'rocm'" in p.log


# ---------------------------------------------------------------------------------------------------------------------
# The Makefile


def make(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        env=os.environ | env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_make_install_checks_python_then_installs_torch_with_the_script(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    result = make("-n", "-B", "install", f"VENV={venv}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    step = {
        name: next(i for i, ln in enumerate(lines) if name in ln)
        for name in ("3, 11", "-m venv", "install_torch.sh", "-e")
    }
    assert step["3, 11"] < step["-m venv"] < step["install_torch.sh"] < step["-e"], lines
    assert f"PYTHON={venv}/bin/python" in lines[step["install_torch.sh"]]
    assert not [ln for ln in lines if "pip install" in ln and "torch" in ln]


def test_make_install_refuses_python_older_than_311(tmp_path: Path) -> None:
    """The check runs on the interpreter make is given, before anything is created: here one that says it is 3.10."""
    old_python = tmp_path / "python3.10"
    old_python.write_text(
        f"#!{sys.executable}\nimport sys\nsys.version_info = (3, 10, 12, 'final', 0)\nexec(sys.argv[2])  # -c CODE\n"
    )
    old_python.chmod(0o755)
    venv = tmp_path / "venv"
    result = make("-B", "install", f"PYTHON={old_python}", f"VENV={venv}")
    assert result.returncode != 0
    assert f"Python >= 3.11 is needed; {old_python} is 3.10.12" in result.stderr
    assert not venv.exists()


@pytest.mark.parametrize("package", ["app", "training"])
def test_python_m_refuses_python_older_than_311(package: str) -> None:
    code = f"import runpy, sys; sys.version_info = (3, 10, 12, 'final', 0); runpy.run_module({package!r}, run_name='__main__')"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert (result.returncode, result.stderr.strip()) == (
        1,
        f"transformer-serving needs Python >= 3.11; this is 3.10.12 ({sys.executable})",
    )


# ---------------------------------------------------------------------------------------------------------------------
# requirements.lock: what the image installs besides torch


def lock_pins() -> dict[str, tuple[str, list[str]]]:
    """name -> (pinned version, sha256 hashes), from the lock's `name==version --hash=sha256:...` entries."""
    pins = {}
    for entry in LOCK.read_text().replace("\\\n", " ").splitlines():
        if not entry.strip() or entry.lstrip().startswith("#"):
            continue
        requirement, *options = entry.split()
        name, _, version = requirement.partition("==")
        pins[canonicalize_name(name)] = (version, [o.removeprefix("--hash=sha256:") for o in options])
    return pins


def unmet(requirements: list[Requirement], pins: dict[str, tuple[str, list[str]]]) -> dict[str, str | None]:
    """Each requirement the lock does not satisfy -> the locked version (None: not in the lock)."""
    missing: dict[str, str | None] = {}
    for r in requirements:
        version = pins.get(canonicalize_name(r.name), (None, []))[0]
        if version is None or not r.specifier.contains(version, prereleases=True):
            missing[r.name] = version
    return missing


def test_lock_pins_every_entry_with_hashes() -> None:
    pins = lock_pins()
    assert len(pins) > 10
    assert {n: v for n, (v, hashes) in pins.items() if not re.fullmatch(r"[\w.]+", v) or not hashes} == {}
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for _, hashes in pins.values() for h in hashes)


def test_lock_satisfies_the_runtime_dependencies() -> None:
    """A dependency added to pyproject.toml fails here until `make lock` is run."""
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    requirements = [Requirement(d) for d in dependencies if Requirement(d).name != "torch"]
    assert unmet(requirements, lock_pins()) == {}, (
        "pyproject.toml and requirements.lock differ: run `make lock`"
    )


def test_lock_satisfies_torchs_requirements_without_cuda_packages() -> None:
    """torch's requirements (this venv's torch 2.13.0) are locked, its CUDA wheels and torch itself are not."""
    requirements = [Requirement(r) for r in importlib.metadata.requires("torch") or []]
    cpu = [
        r
        for r in requirements
        if (r.marker is None or r.marker.evaluate({"extra": ""}))
        and not r.name.startswith("nvidia-")
        and r.name != "triton"
    ]
    pins = lock_pins()
    assert len(cpu) >= 5
    assert unmet(cpu, pins) == {}
    assert [n for n in pins if n in ("torch", "triton") or n.startswith("nvidia-")] == []
