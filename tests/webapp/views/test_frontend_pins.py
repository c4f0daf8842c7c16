"""The browser draws charts with the same Vega versions that render their PNGs on the server, and
htmx stays on the 2.0 line the templates are written for (htmx 4 changed inheritance and error swaps)."""

from __future__ import annotations

import json

import vl_convert

from tests.workers.processes import ROOT

LOCK = json.loads((ROOT / "frontend" / "package-lock.json").read_text())


def locked(name: str) -> str:
    return LOCK["packages"][f"node_modules/{name}"]["version"]


def test_htmx_is_pinned_to_2_0() -> None:
    assert locked("htmx.org").startswith("2.0.")


def test_the_browsers_vega_matches_the_servers_png_renderer() -> None:
    assert locked("vega") == vl_convert.get_vega_version()
    assert locked("vega-embed") == vl_convert.get_vega_embed_version()
    major_minor = ".".join(locked("vega-lite").split(".")[:2])
    assert major_minor in vl_convert.get_vegalite_versions()
