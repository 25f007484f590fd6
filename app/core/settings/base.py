"""What every settings group shares: the environment prefix, the repository root and the error type."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
ENV_PREFIX = "APP_"


class SettingsError(ValueError):
    """An invalid setting; the message names the environment variable."""
