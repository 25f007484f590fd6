"""What every pull test asks of a refused `python -m training pull`."""

from __future__ import annotations

import pytest

from training import pull


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the pull that must fail: exit 1 and one line on stderr, returned."""
    assert pull.cli(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: pull {argv[0]}: ")
    return err
