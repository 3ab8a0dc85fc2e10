"""The configuration reference (docs/clavisd.md) generated from the Config model, so the
documented options and defaults cannot drift from the code (a test compares them)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from clavis.service.config import Config


def _default(value: Any) -> str:
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value, default=str)


def rows() -> list[tuple[str, str, str]]:
    """(option, default, description) for every option, ``section.key`` for sections."""
    out: list[tuple[str, str, str]] = []
    for name, field in Config.model_fields.items():
        default = field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            for key, sub in type(default).model_fields.items():
                value = sub.get_default(call_default_factory=True)
                out.append((f"{name}.{key}", _default(value), sub.description or ""))
        else:
            out.append((name, _default(default), field.description or ""))
    return out


def table() -> str:
    lines = ["| option | default | meaning |", "|---|---|---|"]
    lines += [f"| `{o}` | `{d}` | {m} |" for o, d, m in rows()]
    return "\n".join(lines)


START, END = "<!-- config:start -->", "<!-- config:end -->"


def render(doc: str) -> str:
    """``doc`` with the text between the config markers replaced by the current table."""
    if START not in doc or END not in doc:
        raise ValueError(f"document lacks the {START} / {END} markers")
    before, rest = doc.split(START, 1)
    return f"{before}{START}\n{table()}\n{END}{rest.split(END, 1)[1]}"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/clavisd.md")
    target.write_text(render(target.read_text()))
