"""Print clavisd's OpenAPI document (what /api/v1/openapi.json serves) without a running
service, for vismon-ui's generated client (vismon-ui/scripts/gen-api.sh; docs/ui.md).

    python -m clavis.service.openapi_doc [OUT]

It builds a real clavisd on a throw-away one-host cluster and SQLite store in a temporary
directory: the document depends only on the code, never on the cluster or the store.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from clavis.service.api import create_app
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd

_CLUSTER = {
    "name": "openapi",
    "hosts": [{"name": "h1", "rack": "r1", "cores": 2,
               "domains": {"count": 1, "cores_per_domain": 2},
               "power": {"idle_w": 10, "peak_w": 20, "off_w": 1}}],
}  # fmt: skip


def document() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="clavis-openapi-") as tmp:
        root = Path(tmp)
        (root / "cluster.json").write_text(json.dumps(_CLUSTER))
        keys = root / "agent-keys.toml"  # a throw-away key: clavisd reads its keys at start
        keys.write_text('[[keys]]\nid = "h1"\nhost = "h1"\nsecret = "' + "k" * 32 + '"\n')
        keys.chmod(0o600)
        (root / "clavis.toml").write_text(
            f'cluster_file = "{root / "cluster.json"}"\n'
            f'[security]\nagent_keys_file = "{keys}"\n'
            f'[store]\nurl = "sqlite:///{root / "clavis.db"}"\n'
            f'[advice]\npath = "{root / "advice.json"}"\n'
            '[ingest]\nwriter = "thread"\n[repack]\ninterval_s = 0\n'
        )
        d = Clavisd(load_config(root / "clavis.toml"))
        d.ingestor.start()  # stop() expects it
        try:
            return create_app(d).openapi()
        finally:
            d.stop()


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
