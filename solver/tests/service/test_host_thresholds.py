"""Thresholds per host model (DINO §3.3.3: what makes a devil depends on the machine):
`classify.host_thresholds`, keyed by host-name prefix, longest prefix first, else
`classify.devil_threshold_mpki`. The same intensity is a devil on one host and a turtle on
another, in ingest's classes and in what repacking and the advice make of them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from clavis.service.api import serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd

from .helpers import container, login, post_report, report, write_setup

# h1 a model with a high threshold, h2 one with a low threshold, h3 and h4 the default.
THRESHOLDS = "[classify]\ndevil_threshold_mpki = 4.5\nhost_thresholds = { h1 = 12.0, h2 = 3.0 }\n"


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_the_same_intensity_is_classified_by_each_hosts_threshold(
    tmp_path: Path, writer: str
) -> None:
    extra = f'{THRESHOLDS}[ingest]\nwriter = "{writer}"\n[repack]\ninterval_s = 0\n'
    d = Clavisd(load_config(write_setup(tmp_path, extra=extra)))
    d.ingestor.start()
    try:
        with TestClient(serve(d)) as client:
            t0 = time.time() - 30

            def send(i: int, mpki: float, hosts: tuple[str, ...]) -> None:
                for h in hosts:  # one container per host, each its own job, same intensity
                    doc = report(h, [container(f"c{h[1:]}", job=f"j{h[1:]}", mpki=mpki)],
                                 ts=t0 + i)  # fmt: skip
                    assert post_report(client, doc).status_code == 202

            # Three samples of 8 MPKI: no class yet (7 votes of 10 needed); in the meantime
            # repacking and the advice judge each intensity by its host's threshold too.
            for i in range(3):
                send(i, 8.0, ("h1", "h2", "h3"))
            send(0, 4.0, ("h4",))
            view = login(client, "vic")
            early = {c["name"]: c for c in client.get("/api/v1/containers", headers=view).json()}
            assert {n: (c["klass"], c["votes"]) for n, c in early.items()} == {
                "c1": (None, "ttt"), "c2": (None, "ddd"), "c3": (None, "ddd"), "c4": (None, "t"),
            }  # fmt: skip
            snap = d.snapshot(time.time())
            assert snap.workload is not None
            judged = {c.name: snap.workload.classify(c)
                      for j in snap.workload.jobs for c in j.containers}  # fmt: skip
            assert judged == {"c1": "turtle", "c2": "devil", "c3": "devil", "c4": "turtle"}
            d.publish_advice()
            nodes = {n["node"]: n["node_class"]
                     for n in json.loads(d.config.advice.path.read_text())["nodes"]}  # fmt: skip
            assert nodes == judged
            # c1 rises to 13 MPKI, over h1's threshold (both were over the default): the
            # advice is rebuilt, not re-issued, and now calls c1 a devil.
            send(3, 13.0, ("h1",))
            d.publish_advice()
            nodes = {n["node"]: n["node_class"]
                     for n in json.loads(d.config.advice.path.read_text())["nodes"]}  # fmt: skip
            assert nodes == {**judged, "c1": "devil"}
            # Seven votes each: the classes are decided by each host's threshold.
            for i in range(4, 8):
                send(i, 8.0, ("h1",))
            for i in range(3, 7):
                send(i, 8.0, ("h2", "h3"))
            for i in range(1, 7):
                send(i, 4.0, ("h4",))
            got = {c["name"]: c for c in client.get("/api/v1/containers", headers=view).json()}
            jobs = {j["name"]: j["klass"] for j in client.get("/api/v1/jobs", headers=view).json()}
    finally:
        d.stop()
    # 8 MPKI: a turtle on h1 (threshold 12), a devil on h2 (3) and on h3 (the default 4.5);
    # 4 MPKI on h4 (the default): a turtle, where on h2 it would be a devil.
    assert {n: (c["klass"], c["class_source"]) for n, c in got.items()} == {
        "c1": ("turtle", "samples"), "c2": ("devil", "samples"), "c3": ("devil", "samples"),
        "c4": ("turtle", "samples"),
    }  # fmt: skip
    assert got["c1"]["votes"] == "tttdtttt" and got["c2"]["votes"] == "d" * 7
    assert got["c1"]["intensity_mpki"] == got["c2"]["intensity_mpki"] == 8.0
    assert jobs == {"j1": "turtle", "j2": "devil", "j3": "devil", "j4": "turtle"}
