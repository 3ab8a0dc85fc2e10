"""Reading and writing the solver's documents: JSON or YAML in, JSON out, atomically.

Every problem with an input file becomes an :class:`InputError` whose message names
the file, the field path and the offending value; the CLI turns it into exit code 2.
"""

from __future__ import annotations

import codecs
import json
import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from clavis.model import Cluster, Placement, Workload

Doc = TypeVar("Doc", bound=BaseModel)


class InputError(Exception):
    """An input document is unreadable or invalid; the message says where and why."""


def _loc(loc: tuple[int | str, ...], data: Any) -> str:
    """Render a pydantic error location as ``hosts[3](node-3).cores``."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                out += f"({node['name']})"
        else:
            out += f".{part}" if out else part
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(document)"


def _shown(value: Any, limit: int = 60) -> str:
    """A value as a message quotes it: enough to find it, bounded (a megabyte of text
    sent back, or written to a log, helps nobody)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(err: ValidationError, data: Any) -> str:
    lines = []
    for e in err.errors():
        where = _loc(tuple(e["loc"]), data)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] in {"missing"}:
            lines.append(f"{where}: field required")
        elif "input" in e and not isinstance(e["input"], dict | list):
            lines.append(f"{where}: {msg} (got {_shown(e['input'])})")
        else:
            lines.append(f"{where}: {msg}")
    return "; ".join(lines)


# Byte-order marks of the encodings a text editor may have saved a file in instead of UTF-8.
_OTHER_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def decode(raw: bytes, path: Path) -> str:
    """The file's text, which must be UTF-8. A UTF-8 byte-order mark is dropped (RFC 8259
    lets a parser ignore it, and editors on some systems write it); UTF-16 and UTF-32 are
    named, with or without a mark, so the admin knows what to convert."""
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    for bom, name in _OTHER_BOMS:  # UTF-32 first: its LE mark begins with UTF-16's
        if raw.startswith(bom):
            raise InputError(f"{path}: {name} text (byte-order mark); save it as UTF-8")
    if b"\x00" in raw[:64]:
        # JSON and YAML start with ASCII: NULs between its letters mean UTF-16/32 sans mark.
        raise InputError(f"{path}: NUL bytes in the text (UTF-16 or UTF-32?); save it as UTF-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(
            f"{path}: not UTF-8: byte 0x{raw[exc.start]:02x} at line {line}, column {column}"
            " (save the file as UTF-8)"
        ) from exc


def read_data(path: Path) -> Any:
    suffix = path.suffix.lower()
    if suffix not in {".json", ".yaml", ".yml"}:
        raise InputError(f"{path}: unknown file type {suffix!r} (use .json, .yaml or .yml)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from exc
    text = decode(raw, path)
    kind = suffix[1:].upper()
    try:
        return json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    except RecursionError as exc:
        raise InputError(f"{path}: not valid {kind}: nested too deeply") from exc
    except (ValueError, yaml.YAMLError) as exc:
        # ValueError: json.JSONDecodeError, and integers too long to convert (both parsers).
        raise InputError(f"{path}: not valid {kind}: {exc}") from exc


def parse(kind: type[Doc], data: Any, source: str) -> Doc:
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping at the top level")
    try:
        return kind.model_validate(data, strict=True)  # `cores: true` or "8" is refused
    except ValidationError as exc:
        raise InputError(f"{source}: {describe(exc, data)}") from exc


def load(kind: type[Doc], path: Path) -> Doc:
    return parse(kind, read_data(path), str(path))


def load_cluster(path: Path) -> Cluster:
    return load(Cluster, path)


def load_workload(path: Path) -> Workload:
    return load(Workload, path)


def load_placement(path: Path) -> Placement:
    return load(Placement, path)


def write_json_atomic(
    path: Path,
    payload: Any,
    indent: int | None = 2,
    *,
    mode: int | None = None,
    gid: int | None = None,
) -> None:
    """Write to a temporary file beside ``path`` and rename: readers never see half a file.
    ``indent=None``: compact, by the C encoder (files only programs read, written often).
    ``mode``/``gid``: the file's mode and group, set before the rename, so no reader ever
    sees the file with other permissions (default: mkstemp's 0600, the writer's group)."""
    path = path.resolve()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if gid is not None:
            os.fchown(fd, -1, gid)
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(payload, indent=indent, sort_keys=False))
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
