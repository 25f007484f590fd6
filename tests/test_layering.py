"""The import layering of pyproject.toml's [tool.importlinter] contracts holds, and a back-import breaks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "model", "engines", "training")
LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which(
    "lint-imports"
)
pytestmark = pytest.mark.skipif(
    LINT_IMPORTS is None, reason="import-linter is not installed (the test extra)"
)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    assert LINT_IMPORTS is not None
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120, check=False
    )


def test_every_import_contract_is_kept() -> None:
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_a_back_import_from_core_to_the_service_breaks_the_layers(tmp_path: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    errors = tmp_path / "app" / "core" / "errors.py"
    errors.write_text(errors.read_text() + "\nimport app.serving.service  # noqa: E402\n")
    r = lint_imports(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "app.core.errors -> app.serving.service" in r.stdout
    assert "No cycles are allowed in app." in r.stdout
