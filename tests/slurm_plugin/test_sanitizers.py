"""The pure C helpers of both plugins, built with AddressSanitizer and
UndefinedBehaviorSanitizer into a private build directory, fed the same garbage as the
plain tests, a corpus of hostile advice files and seeded random mutants of valid ones:
no out-of-bounds access, leak or undefined behaviour, and every file answered in
bounded time (the advice reader's part of issue 15). The watcher thread that reads the
file for the plugin, with job tests holding its advice meanwhile, is run under those
and under ThreadSanitizer (no data race)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from .minicluster import REPO
from .test_select_advice import WATCH_TRANSCRIPT, watch_sources, watch_transcript

SAN_FLAGS = "-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
TSAN_FLAGS = "-O1 -g -fsanitize=thread"


def sanitized(tmp_path_factory: pytest.TempPathFactory, flags: str, *drivers: str) -> Path:
    build = tmp_path_factory.mktemp("san-build")
    cp = subprocess.run(
        ["make", "-C", str(REPO / "slurm-plugin"), f"BUILD={build}", f"CFLAGS={flags}",
         *(f"{build}/{d}" for d in drivers)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return build


@pytest.fixture(scope="module")
def san_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sanitized(tmp_path_factory, SAN_FLAGS, "clavis_advice_test", "clavis_msg_test",
                     "clavis_narrow_test")  # fmt: skip


@pytest.fixture(scope="module")
def tsan_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sanitized(tmp_path_factory, TSAN_FLAGS, "clavis_advice_test", "clavis_narrow_test")


def run(exe: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=99",
        "TSAN_OPTIONS": "halt_on_error=1:exitcode=66",
    }
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_advice_reader_on_garbage(san_build: Path, tmp_path: Path) -> None:
    drv = san_build / "clavis_advice_test"
    f = tmp_path / "advice.json"
    samples = [
        b"",
        b"[" * 5000,
        b'{"a":"\\ud83d\\ude00","b":[1,2.5e-3,-0,true,false,null]}',
        b'{"nodes":[{"node":"n1","host":"h","rack":"r","contention":"ok","node_class":"devil"},'
        b'{"node":"n1"}],"generated":"2026-11-22T19:45:05Z","valid_s":1}',
        b'{"schema_version":1,"kind":"clavis.advice","generated":"2026-11-22T19:45:05Z",'
        b'"valid_s":180,"nodes":[{"node":"n2","host":"h","rack":"r","contention":"ok",'
        b'"node_class":"devil"},{"node":"n1","host":"h","rack":"r","contention":"ok",'
        b'"node_class":"unknown"}]}',
        b'{"schema_version":2,"kind":"clavis.advice","generated":"2026-11-22T19:45:05Z",'
        b'"valid_s":180,"nodes":[],"apps":[{"app":"1000:b","app_class":"devil","jobs_seen":1},'
        b'{"app":"0:a","app_class":"turtle","jobs_seen":2},{"app":"1000:b","app_class":'
        b'"devil","jobs_seen":1}]}',
        b'{"schema_version":2,"generated":"2026-11-22T19:45:05Z","valid_s":1,"nodes":[],'
        b'"apps":[{"app":"0:a","app_class":"devil","jobs_seen":1},{"app":"1:"}]}',
        b'{"schema_version":2,"generated":"2026-11-22T19:45:05Z","valid_s":1,"nodes":[],"apps":[]}',
        b'"\\u12',
        b"1e",
        *(os.urandom(n) for n in (1, 7, 100, 5000)),
    ]
    for data in samples:
        f.write_bytes(data)
        for args in (("parse", str(f), "0"), ("load", str(f), "0", "100000", "3")):
            cp = run(drv, *args)
            assert cp.returncode == 0, (data[:40], cp.stderr[-3000:])
    for text in ("2026-11-22T19:45:05.123456789+05:30", "9999-99-99T99:99:99Z", "x" * 40):
        assert run(drv, "rfc3339", text).returncode == 0
    for uid, name in (("0", "x" * 240), ("4294967295", "é" * 120), ("1", ""), ("9" * 30, "a")):
        assert run(drv, "key", uid, name).returncode == 0


def test_request_builder_on_garbage(san_build: Path, tmp_path: Path) -> None:
    drv = san_build / "clavis_msg_test"
    cg = tmp_path / "cgroup"
    cg.write_bytes(
        b"12:memory:/slurm_n/uid_0/job_9/step_0/task_0\n0::/job_9/step_batch\n"
        + os.urandom(3000)
        + b"\n3:a,b:/job_9/step_1\n::\n:\n9"
    )
    for args in (
        ("register", "n1", "9", "0", "0", "/bin/app", "devil", "1,2,3", str(cg)),
        ("register", "n" * 200, "9", "0", "-", "-", "auto", "1"),
        ("register", "n1", "9", "0", "-", "-", "auto", ",".join(map(str, range(1, 5000)))),
        ("deregister", "n1", "9", "0"),
        ("cgroups", "9", str(cg)),
        ("app", "/a/b/\x01\x7f" + "x" * 300),
        ("exchange", str(tmp_path / "absent.sock"), "50"),
    ):
        cp = run(drv, *args)
        assert cp.returncode in (0, 3), (args[:3], cp.stderr[-3000:])


GEN = "2026-11-22T19:45:05Z"
NOW = "1795376710"  # 5 s after GEN
VALID_S = b'"valid_s": 180'  # as advice_doc writes it


def advice_doc(n: int, **changes: object) -> dict[str, object]:
    # two nodes per host, one rack per node; hosts in turn: a devil's, devil-free,
    # unknown, contended
    kinds = (("ok", "devil"), ("devil-free", "turtle"), ("unknown", "unknown"),
             ("contended", "unknown"))  # fmt: skip
    nodes = [
        {"node": f"n{i:05d}", "host": f"h{i // 2:05d}", "rack": f"r{i:05d}",
         "contention": kinds[i // 2 % 4][0], "node_class": kinds[i // 2 % 4][1]}
        for i in range(n)
    ]  # fmt: skip
    doc: dict[str, object] = {
        "schema_version": 2, "kind": "clavis.advice", "generated": GEN, "valid_s": 180,
        "nodes": nodes, "apps": [{"app": "1000:job", "app_class": "devil", "jobs_seen": 3}],
    }  # fmt: skip
    doc.update(changes)
    return doc


def hostile_corpus(n: int = 40) -> dict[str, bytes]:
    """Advice files a broken or hostile writer could leave, made from a valid file of
    ``n`` nodes (bench/chaos uses 20,000): each is refused or read, never a crash."""
    good = json.dumps(advice_doc(n)).encode()
    node = json.dumps(advice_doc(1)["nodes"]).encode()[1:-1]
    step = max(97, len(good) // 64)  # at most 64 truncations of a large file
    corpus: dict[str, bytes] = {f"truncated-{k}": good[:k] for k in range(0, len(good), step)}
    corpus |= {
        "valid": good,
        "empty-nodes-v2": json.dumps(advice_doc(0, apps=[])).encode(),
        "empty-nodes-v2-apps": json.dumps(advice_doc(0)).encode(),
        "empty-nodes-v1": json.dumps(advice_doc(0, schema_version=1, apps=None))
        .replace(', "apps": null', "")
        .encode(),
        "nested-16": b'{"nodes":' + b"[" * 15 + b"]" * 15 + b"}",
        "nested-deep": b"[" * 1_000_000,
        "nested-objects": b'{"a":' * 100_000,
        "huge-string": b'{"kind":"' + b"x" * (3 << 20) + b'"}',
        "huge-number": b'{"valid_s":' + b"9" * (3 << 20) + b"}",
        "huge-list": b'{"nodes":[' + b",".join([node] * 65_537) + b"]}",
        "many-keys": b"{" + b",".join(b'"k%d":0' % i for i in range(200_000)) + b"}",
        "duplicate-nodes": json.dumps(advice_doc(3)).replace('"n00001"', '"n00000"').encode(),
        "duplicate-key": good.replace(VALID_S, VALID_S + b', "valid_s": 1'),
        "nan": good.replace(VALID_S, b'"valid_s": NaN'),
        "infinity": good.replace(VALID_S, b'"valid_s": Infinity'),
        "overflow": good.replace(VALID_S, b'"valid_s": 1e999'),
        "valid-s-huge": good.replace(VALID_S, b'"valid_s": 1e308'),
        "far-future": good.replace(GEN.encode(), b"9999-12-31T23:59:59Z"),
        "negative-zero": good.replace(VALID_S, b'"valid_s": -0'),
        "wrong-types": json.dumps(advice_doc(2, nodes={"n": 1}, apps="x")).encode(),
        "wrong-node-types": json.dumps(advice_doc(1, nodes=[[1], None, 3.5])).encode(),
        "non-utf8-name": good.replace(b"n00003", b"n\xff\xfe03"),
        "non-utf8-app": good.replace(b"1000:job", b"1000:j\xc0\xafb"),
        "surrogate-raw": good.replace(b"1000:job", b"1000:\xed\xa0\x80"),
        "nul-bytes": good.replace(b"n00004", b"n\x0000004"),
        "random": bytes(random.Random(15).randbytes(1 << 20)),
    }
    return corpus


def test_hostile_advice_corpus(san_build: Path, tmp_path: Path) -> None:
    drv = san_build / "clavis_advice_test"
    f = tmp_path / "advice.json"
    outcomes = {}
    for name, data in hostile_corpus().items():
        f.write_bytes(data)
        for args in (("parse", str(f), NOW), ("load", str(f), NOW, str(4 << 20), "3")):
            t0 = time.monotonic()
            cp = run(drv, *args)
            assert cp.returncode == 0, (name, cp.stderr[-3000:])
            # bounded: a 4 MiB file once, under both sanitizers, on a shared machine
            assert time.monotonic() - t0 < 20, name
        outcomes[name] = cp.stdout
    # what must be read is read, and what must be refused is refused
    assert outcomes["empty-nodes-v2"] == "advice 0 nodes (read 1 times)\n"
    assert outcomes["empty-nodes-v1"] == "advice 0 nodes (read 1 times)\n"
    assert outcomes["far-future"].startswith("none: stale")
    assert outcomes["valid-s-huge"].startswith("none: valid_s")
    for name in ("huge-list", "duplicate-nodes", "duplicate-key", "nan", "non-utf8-app"):
        assert outcomes[name].startswith("none: "), (name, outcomes[name])


def test_empty_nodes_never_reach_qsort(san_build: Path, tmp_path: Path) -> None:
    """An empty node list (or applications list) is read as nothing to say: never a
    NULL base to qsort/bsearch (UBSan's nonnull-attribute), never a rack to count."""
    f, nodes = tmp_path / "advice.json", tmp_path / "nodes"
    nodes.write_text("n1\nn2\n!n3\n")
    for doc in (advice_doc(0), advice_doc(0, apps=[])):
        f.write_text(json.dumps(doc))
        cp = run(san_build / "clavis_advice_test", "parse", str(f), NOW)
        assert cp.returncode == 0 and cp.stdout.startswith("fresh 0\n"), cp.stderr[-3000:]
        for devil, strict in ((1, 1), (1, 0), (0, 0)):
            cp = run(san_build / "clavis_narrow_test", "narrow", str(f), NOW, str(nodes),
                     "2", str(devil), str(strict))  # fmt: skip
            assert cp.returncode == 0, cp.stderr[-3000:]
            assert cp.stdout == "nothing: not narrower\n"


def test_seeded_mutants(san_build: Path, tmp_path: Path) -> None:
    """Random edits (bytes, truncation, deleted and duplicated runs, hostile tokens such
    as NaN, 1e999, deep brackets, invalid UTF-8) of valid advice, parsed from buffers of
    exactly their size so that any read past the end is caught."""
    f = tmp_path / "advice.json"
    for n, cases in ((6, 20_000), (2_000, 300)):
        f.write_text(json.dumps(advice_doc(n)))
        cp = run(san_build / "clavis_advice_test", "fuzz", str(f), str(cases), str(n))
        assert cp.returncode == 0, cp.stderr[-3000:]
        words = cp.stdout.split()
        assert words[:2] == ["fuzz", str(cases)], cp.stdout
        assert int(words[3]) + int(words[5]) == cases
        assert int(words[7]) < 5_000_000, cp.stdout  # no case near pathological


def test_job_test_on_hostile_advice(san_build: Path, tmp_path: Path) -> None:
    """The plugin's own work in a job test at 20,000 nodes, one rack per node, under
    both sanitizers, while the watcher thread reads the file 3 times: clean, and the
    candidates it keeps are the right ones."""
    f, nodes = tmp_path / "advice.json", tmp_path / "nodes"
    f.write_text(json.dumps(advice_doc(20_000)))
    nodes.write_text("".join(f"n{i:05d}\n" for i in range(20_000)))
    cp = run(san_build / "clavis_narrow_test", "time", str(f), NOW, str(nodes), "2", "1", "5")
    assert cp.returncode == 0, cp.stderr[-3000:]
    words = cp.stdout.split()
    got = dict(zip(words[0::2], words[1::2], strict=True))
    # no rack holds 2 nodes; the devil-free hosts are a quarter of the nodes
    assert got["kept"] == "5000" and got["changes"] == "3", cp.stdout


@pytest.mark.parametrize("kind", ["asan-ubsan", "tsan"])
def test_watcher_thread_under_sanitizers(
    kind: str, san_build: Path, tsan_build: Path, tmp_path: Path
) -> None:
    """The watcher's scenario of test_select_advice.py (changes, refusals, removal,
    staleness) with job tests holding the advice while the thread swaps it; then job
    tests at 2,000 nodes while the thread reloads the file 5 times: no sanitizer
    report (ASan/UBSan: no use after free of a swapped advice, no leak; TSan: every
    access to the shared advice under the mutex)."""
    build = san_build if kind == "asan-ubsan" else tsan_build
    adv, sources = watch_sources(tmp_path)
    cp = run(build / "clavis_advice_test", "watch", str(adv), "100000", *sources)
    assert cp.returncode == 0, cp.stderr[-3000:]
    assert watch_transcript(cp.stdout, tmp_path) == WATCH_TRANSCRIPT
    f, nodes = tmp_path / "big.json", tmp_path / "nodes"
    f.write_text(json.dumps(advice_doc(2_000)))
    nodes.write_text("".join(f"n{i:05d}\n" for i in range(2_000)))
    cp = run(build / "clavis_narrow_test", "time", str(f), NOW, str(nodes), "2", "1", "5", "5")
    assert cp.returncode == 0, cp.stderr[-3000:]
    assert " changes 5" in cp.stdout, cp.stdout
