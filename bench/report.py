"""What every benchmark report needs: the machine it ran on, and its own section of
docs/benchmarks.md (between markers, so benchmarks can rewrite their part alone)."""

from __future__ import annotations

import json
import os
import platform
import time
from importlib.metadata import version
from pathlib import Path


def machine() -> dict[str, object]:
    cpu, mem_kib = "unknown", 0
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        mem_kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "python": platform.python_version(),
        "ortools": version("ortools"),
        "pymoo": version("pymoo"),
        "kernel": platform.release(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def describe(info: dict[str, object]) -> str:
    return (
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB, "
        f"Python {info['python']}, OR-Tools {info['ortools']}, pymoo {info['pymoo']}, "
        f"{info['date']}."
    )


def write_json(path: Path, payload: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)


def write_section(path: Path, name: str, body: str) -> None:
    """Replace (or append) the section delimited by ``<!-- name:start/end -->``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    section = f"{start}\n{body.strip()}\n{end}"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
