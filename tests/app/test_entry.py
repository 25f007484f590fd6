"""The service's one entry (issue 29, item 7): `python -m app`, with the connection limits. A bare
`uvicorn app.main:app` would serve without them, so app.main offers no module-level app."""

from __future__ import annotations

import importlib

import pytest
from uvicorn.importer import ImportFromStringError, import_from_string


def test_uvicorn_app_main_app_is_not_offered() -> None:
    main = importlib.import_module("app.main")
    assert not hasattr(main, "app")
    with pytest.raises(ImportFromStringError, match='Attribute "app" not found'):
        import_from_string("app.main:app")  # what `uvicorn app.main:app` does first
