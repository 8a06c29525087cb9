"""The inspector's page: one HTML file with everything inlined (plotly.js, the page's own script
and style, the run's data), so it opens from disk with no server and no network.

The run's data goes in as JSON inside `<script type="application/json">`, with every `<`, `>`
and `&` written as a JSON escape: no byte sequence the policy produced can close that element
or open another, and the page's script reads it with JSON.parse and renders strings as text.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import plotly.offline

ASSETS = resources.files("tandem.inspect") / "assets"
JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embedded_json(payload: Any) -> str:
    """`payload` as JSON that is inert inside a script element (see the module docstring)."""
    text = json.dumps(payload, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    for char, escape in JSON_ESCAPES.items():
        text = text.replace(char, escape)
    return text


def inline_script(code: str) -> str:
    """A script element holding `code`; a `</script` inside it (only ever in a string or a
    comment of a library) is written so that the HTML parser does not end the element there."""
    return "<script>" + code.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT") + "</script>"


def render(payload: dict[str, Any]) -> str:
    """The whole page for `payload` (tandem.inspect.run_data.RunData.payload())."""
    title = "tandem inspect"  # fixed: the run's own name is data, set by the script as text
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # No network: the page may only use what it carries (inline script and style, data: images).
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:; "
        "font-src data:\">",
        f"<title>{title}</title>",
        "<style>" + (ASSETS / "inspect.css").read_text() + "</style>",
        "</head><body>",
        (ASSETS / "body.html").read_text(),
        '<script type="application/json" id="run-data">' + embedded_json(payload) + "</script>",
        inline_script(plotly.offline.get_plotlyjs()),
        inline_script((ASSETS / "inspect.js").read_text()),
        "</body></html>",
    ])


def write_page(payload: dict[str, Any], out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render(payload), encoding="utf-8")
    tmp.replace(out)  # a page open in a browser is replaced whole, never seen half-written
    return out
