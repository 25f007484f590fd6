"""GET / and /static: the demo page (plain HTML/JS/CSS in app/static). Public even with APP_API_KEY: the page
is where the key is entered, and it sends the key (X-API-Key) with every API call it makes."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"

router = APIRouter(tags=["demo"], include_in_schema=False)  # no require_api_key dependency


@router.get("/")
async def index() -> FileResponse:
    """The demo page: sentiment, translation and attention heatmaps over the JSON API."""
    return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


def install(app: FastAPI) -> None:
    """GET / plus StaticFiles at /static (on the app: older FastAPI drops mounts of included routers)."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
