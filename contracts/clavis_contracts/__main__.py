"""``python -m clavis_contracts [--write DIR]``: print or write the contracts' JSON Schemas."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from clavis_contracts import json_schemas


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clavis_contracts", description=__doc__)
    p.add_argument("--write", metavar="DIR", help="write <kind>.schema.json files into DIR")
    args = p.parse_args(argv)
    schemas = json_schemas()
    if args.write is None:
        print(json.dumps(schemas, indent=2))
        return 0
    target = Path(args.write)
    target.mkdir(parents=True, exist_ok=True)
    for kind, schema in schemas.items():
        _write_atomic(target / f"{kind}.schema.json", json.dumps(schema, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
