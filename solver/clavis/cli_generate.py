"""`clavis generate`: a realistic snapshot (``clavis.realistic``) as the files `solve` reads."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from clavis.documents import InputError
from clavis.realistic import RealisticSpec, generate


def cmd_generate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if not out.is_dir():
        raise InputError(f"--out: {out} is not a directory")
    try:
        spec = RealisticSpec(
            hosts=args.hosts,
            seed=args.seed,
            utilisation=args.utilisation,
            containers=args.containers,
            current=args.current,
        )
        snapshot = generate(spec)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    for path in snapshot.write(out):
        print(f"wrote {path}")
    return 0


def add_parsers(sub: Any) -> None:
    g = sub.add_parser("generate", help="write a realistic seeded snapshot (benchmarks, demos)")
    g.add_argument("--hosts", type=int, required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--utilisation", type=float, default=0.6, help="share of cores used (0.6)")
    g.add_argument("--containers", type=int, help="exact container count (overrides utilisation)")
    g.add_argument("--current", action="store_true", help="also write a fragmented current.json")
    g.add_argument("--out", required=True, metavar="DIR", help="existing directory to write into")
    g.set_defaults(func=cmd_generate)
