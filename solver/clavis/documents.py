"""Reading and writing the solver's documents: JSON or YAML in, JSON out, atomically.

Every problem with an input file becomes an :class:`InputError` whose message names
the file, the field path and the offending value; the CLI turns it into exit code 2.
"""

from __future__ import annotations

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


def describe(err: ValidationError, data: Any) -> str:
    lines = []
    for e in err.errors():
        where = _loc(tuple(e["loc"]), data)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] in {"missing"}:
            lines.append(f"{where}: field required")
        elif "input" in e and not isinstance(e["input"], dict | list):
            lines.append(f"{where}: {msg} (got {e['input']!r})")
        else:
            lines.append(f"{where}: {msg}")
    return "; ".join(lines)


def read_data(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from exc
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            return json.loads(text)
        if suffix in {".yaml", ".yml"}:
            return yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: not valid {suffix[1:].upper()}: {exc}") from exc
    raise InputError(f"{path}: unknown file type {suffix!r} (use .json, .yaml or .yml)")


def parse(kind: type[Doc], data: Any, source: str) -> Doc:
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping at the top level")
    try:
        return kind.model_validate(data)
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
