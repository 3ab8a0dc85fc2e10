"""The built admin UI (vismon-ui/dist: static HTML, JS and CSS) served by clavisd at /ui/,
so the head node needs no Node.js at run time (issue 16; docs/ui.md)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

UI_PREFIX = "/ui"


def mount(app: FastAPI, ui_dir: Path | None) -> None:
    """Serve ``ui_dir`` at /ui/ and send / there; nothing when the option is unset. A
    configured directory without index.html is a configuration error (load_config)."""
    if ui_dir is None:
        return
    app.mount(UI_PREFIX, StaticFiles(directory=ui_dir, html=True), name="ui")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse(f"{UI_PREFIX}/")
