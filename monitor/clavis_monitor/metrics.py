"""Prometheus text exposition of the agent's last snapshot, served on /metrics.

Manual equivalent: ``curl http://127.0.0.1:9782/metrics``. A scrape renders the snapshot
the reporter thread stored last; it never runs a command or reads a counter.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Metric:
    name: str
    help: str
    kind: str  # gauge | counter
    samples: tuple[tuple[dict[str, str], float], ...]


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(metrics: Iterable[Metric]) -> str:
    out: list[str] = []
    for m in metrics:
        out.append(f"# HELP {m.name} {m.help}")
        out.append(f"# TYPE {m.name} {m.kind}")
        for labels, value in m.samples:
            lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            out.append(f"{m.name}{{{lab}}} {value!r}" if lab else f"{m.name} {value!r}")
    return "\n".join(out) + "\n"


def serve(listen: str, port: int, snapshot: Callable[[], list[Metric]]) -> ThreadingHTTPServer:
    """Serve ``render(snapshot())`` on /metrics; ``snapshot`` must only read stored values."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = render(snapshot()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # scrapes are not logged

    server = ThreadingHTTPServer((listen, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
