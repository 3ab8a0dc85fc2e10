"""select_clavis.so's advice reader on its own (build/clavis_advice_test): what clavisd
writes is read as written (schema v2 with its applications, and v1 files of an older
clavisd), garbage of every shape is refused with a reason, the size limit and the
staleness rule hold, a file is parsed again only when it changes (by the plugin's
watcher thread, whose job tests only hold what it swapped in), the application key is
made as the contract makes it, and the source script refuses a Slurm tree of another
version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clavis_contracts.advice import MAX_AHEAD_S, MAX_VALID_S, AdviceApp, AdviceFile, AdviceNode
from clavis_contracts.application import MAX_NAME_BYTES, app_key

from .minicluster import BUILD, REPO, slurm_available

DRIVER = BUILD / "clavis_advice_test"
NOW = 1_795_000_000.0


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    cp = subprocess.run(
        ["make", "-C", str(REPO / "slurm-plugin"), "build/clavis_advice_test"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert cp.returncode == 0, cp.stdout + cp.stderr


def drive(*args: str) -> str:
    cp = subprocess.run(
        [str(DRIVER), *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


def contract_advice(generated: float = NOW) -> str:
    """An advice file as clavisd writes it: the contract's model, dumped as JSON."""
    doc = AdviceFile(
        generated=datetime.fromtimestamp(generated, UTC),
        valid_s=180.0,
        nodes=[
            AdviceNode(node="r1h1c2", host="r1h1", rack="r1", contention="ok", node_class="devil"),
            AdviceNode(
                node="r1h1c1", host="r1h1", rack="r1", contention="ok", node_class="unknown"
            ),
            AdviceNode(
                node="r2h1c1", host="r2h1", rack="r2", contention="devil-free", node_class="turtle"
            ),
            AdviceNode(
                node="r2h2c1", host="r2h2", rack="r2", contention="unknown", node_class="unknown"
            ),
        ],
        apps=[
            AdviceApp(app="1000:stream.sh", app_class="devil", jobs_seen=3),
            AdviceApp(app="0:sbatch", app_class="turtle", jobs_seen=1),
            AdviceApp(app="1000:my job é", app_class="devil", jobs_seen=1),
        ],
    )
    return doc.model_dump_json()


def test_reads_what_clavisd_writes(tmp_path: Path) -> None:
    f = tmp_path / "advice.json"
    f.write_text(contract_advice())
    assert drive("parse", str(f), str(NOW + 10)).splitlines() == [
        "fresh 4",
        "r1h1c1 r1h1 r1 ok unknown 1",  # sorted by node; its host runs a devil
        "r1h1c2 r1h1 r1 ok devil 1",
        "r2h1c1 r2h1 r2 devil-free turtle 0",
        "r2h2c1 r2h2 r2 unknown unknown 0",
        "v2 apps 3",  # sorted by key, byte by byte
        "0:sbatch turtle",
        "1000:my job é devil",
        "1000:stream.sh devil",
    ]
    # pretty-printed the same
    f.write_text(json.dumps(json.loads(contract_advice()), indent=4))
    assert drive("parse", str(f), str(NOW)).startswith("fresh 4\n")


def test_reads_a_version_1_file_of_an_older_clavisd(tmp_path: Path) -> None:
    f = tmp_path / "advice.json"
    doc = {**json.loads(contract_advice()), "schema_version": 1}
    del doc["apps"]
    f.write_text(json.dumps(doc))
    out = drive("parse", str(f), str(NOW)).splitlines()
    assert out[0] == "fresh 4" and out[-1] == "v1 apps 0"


def test_application_key_is_the_contracts() -> None:
    """The key select_clavis makes from a job record equals clavis_contracts'."""
    names = ["stream.sh", "my job é", "a:b", "x" * MAX_NAME_BYTES, "x" * (MAX_NAME_BYTES + 1),
             "é" * (MAX_NAME_BYTES // 2), "é" * (MAX_NAME_BYTES // 2 + 1), ""]  # fmt: skip
    for uid in (0, 1000, 4294967295):
        for name in names:
            want = app_key(uid, name)
            got = drive("key", str(uid), name).rstrip("\n")
            assert got == (want if want is not None else "none"), (uid, name)
    assert drive("key", "4294967296", "x") == "none\n"


def test_staleness(tmp_path: Path) -> None:
    f = tmp_path / "advice.json"
    f.write_text(contract_advice())
    assert drive("parse", str(f), str(NOW + 180)).startswith("fresh")
    assert drive("parse", str(f), str(NOW + 181)).startswith("stale")
    assert drive("parse", str(f), str(NOW - 60)).startswith("fresh")  # clocks a bit apart
    assert drive("parse", str(f), str(NOW - 61)).startswith("stale")  # from the future
    assert drive("load", str(f), str(NOW + 181), "100000") == (
        "none: stale (older than its valid_s) (read 1 times)\n"
    )


def test_valid_s_is_bounded(tmp_path: Path) -> None:
    """No file stays fresh for ever: a valid_s over an hour (the contract's bound) is
    refused, and a `generated` over a minute ahead is stale (a far-future one at once)."""
    f = tmp_path / "advice.json"
    doc = {**GOOD, "valid_s": 3600}
    f.write_text(json.dumps(doc))
    assert drive("parse", str(f), str(NOW + 3600)).startswith("fresh")
    assert drive("parse", str(f), str(NOW + 3601)).startswith("stale")
    for valid_s in (3600.001, 1e308, 86400 * 365 * 1000):
        f.write_text(json.dumps({**doc, "valid_s": valid_s}))
        assert drive("parse", str(f), str(NOW)) == (
            "refused: valid_s is missing, not positive or over 3600 s\n"
        )
    far = {**doc, "generated": "9999-12-31T23:59:59Z"}
    f.write_text(json.dumps(far))
    assert drive("parse", str(f), str(NOW)).startswith("stale")
    f.write_text(json.dumps({**far, "valid_s": 1e300}))
    assert drive("load", str(f), str(NOW), "100000").startswith("none: valid_s")


def test_freshness_bounds_are_the_contracts(tmp_path: Path) -> None:
    """The C reader and clavis_contracts.advice agree on which valid_s is allowed and on
    when a file is fresh, at the bounds and just past them."""
    header = (REPO / "slurm-plugin/select/clavis_advice.h").read_text()
    assert f"#define CLAVIS_ADVICE_MAX_VALID_S {MAX_VALID_S}" in header
    assert f"#define CLAVIS_ADVICE_MAX_AHEAD_S {MAX_AHEAD_S}" in header
    f = tmp_path / "advice.json"
    for valid_s in (0.5, 180.0, MAX_VALID_S, MAX_VALID_S + 0.5, 1e308):
        doc = {**GOOD, "valid_s": valid_s}
        f.write_text(json.dumps(doc))
        try:
            model: AdviceFile | None = AdviceFile.model_validate(doc)
        except ValueError:
            model = None
        for now in (NOW - MAX_AHEAD_S - 0.5, NOW - MAX_AHEAD_S, NOW, NOW + valid_s,
                    NOW + valid_s + 0.5):  # fmt: skip
            out = drive("parse", str(f), str(now))
            if model is None:
                assert out.startswith("refused: valid_s"), (valid_s, out)
            else:
                want = "fresh" if model.fresh(now) else "stale"
                assert out.startswith(want), (valid_s, now, out)


def test_rfc3339() -> None:
    assert drive("rfc3339", "2026-11-22T19:45:05Z") == "1795376705.000000\n"
    assert drive("rfc3339", "2026-11-22T20:45:05.5+01:00") == "1795376705.500000\n"
    assert drive("rfc3339", "2026-11-22T18:45:05-01:00") == "1795376705.000000\n"
    for bad in ("2026-11-22T19:45:05", "2026-13-22T19:45:05Z", "2026-11-22 19:45Z", "x", "",
                "2026-11-22T19:45:05.Z", "2026-11-22T19:45:05Z trailing"):  # fmt: skip
        assert drive("rfc3339", bad) == "bad\n", bad


GOOD = json.loads(contract_advice())


def variant(**changes: object) -> bytes:
    doc = {**GOOD, **changes}
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def app(**changes: object) -> bytes:
    a = {**GOOD["apps"][0], **changes}
    return variant(apps=[GOOD["apps"][1], {k: v for k, v in a.items() if v is not None}])


def node(**changes: object) -> bytes:
    n = {**GOOD["nodes"][0], **changes}
    return variant(nodes=[{k: v for k, v in n.items() if v is not None}])


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "value expected"),
        (b"null", "not an object"),
        (b"[]", "not an object"),
        (b'{"a":1}', "not an object of the schema's keys"),
        (b"{" + contract_advice().encode()[1:] + b"}", "trailing data"),
        (contract_advice().encode()[:-1], "expected"),
        (variant(schema_version=3), "schema_version is not 1 or 2"),
        (variant(schema_version=1), "apps needs schema_version 2"),
        (variant(apps={}), "apps is not a list"),
        (variant(apps=[1]), "apps entry is not an object"),
        (app(extra=1), "apps entry is not an object"),
        (app(app=None), "invalid application key"),
        (app(app="1000"), "invalid application key"),
        (app(app="01:x"), "invalid application key"),
        (app(app="-1:x"), "invalid application key"),
        (app(app=":x"), "invalid application key"),
        (app(app="1:"), "invalid application key"),
        (app(app="4294967296:x"), "invalid application key"),
        (app(app="12345678901:x"), "invalid application key"),
        (app(app="1:" + "x" * 241), "invalid application key"),
        (app(app=7), "invalid application key"),
        (app(app_class="unknown"), "invalid app_class or jobs_seen"),
        (app(jobs_seen=0), "invalid app_class or jobs_seen"),
        (app(jobs_seen="3"), "invalid app_class or jobs_seen"),
        (variant(apps=[GOOD["apps"][0], GOOD["apps"][0]]), "application is listed twice"),
        (variant(kind="other"), "kind is not clavis.advice"),
        (variant(generated="2026-11-22T19:45:05"), "generated"),
        (variant(generated=None), "generated"),
        (variant(valid_s=0), "valid_s"),
        (variant(valid_s="180"), "valid_s"),
        (variant(nodes={}), "nodes is missing"),
        (variant(nodes=None), "nodes is missing"),
        (variant(nodes=[1]), "node entry is not an object"),
        (node(extra=1), "node entry is not an object"),
        (node(node=None), "missing or invalid"),
        (node(node="-bad"), "missing or invalid"),
        (node(host="h" * 129), "missing or invalid"),
        (node(rack=""), "missing or invalid"),
        (node(contention="busy"), "invalid contention"),
        (node(node_class="angel"), "invalid contention or node_class"),
        (variant(nodes=[GOOD["nodes"][0], GOOD["nodes"][0]]), "listed twice"),
        (b'{"valid_s":1e999}', "bad number"),
        (b'{"valid_s":01}', "bad number"),
        (b'{"valid_s":-}', "bad number"),
        (app(app="1000:\u00e9").replace(b"\\u00e9", b"\xff"), "invalid UTF-8"),
        (app(app="1000:\u00e9").replace(b"\\u00e9", b"\xc3\xa9"[:1]), "invalid UTF-8"),
        (app(app="1000:x").replace(b"1000:x", b"1000:\xc0\xaf"), "invalid UTF-8"),  # overlong
        (app(app="1000:x").replace(b"1000:x", b"1000:\xed\xa0\x80"), "invalid UTF-8"),
        (app(app="1000:x").replace(b"1000:x", b"1000:\xf4\x90\x80\x80"), "invalid UTF-8"),
        (b'{"valid_s":' + b"1" * 65 + b"}", "number too long"),
        (b'{"kind":"a\x01"}', "control character"),
        (b'{"kind":"\\u0000"}', "NUL in string"),
        (b'{"kind":"\\ud800"}', "lone surrogate"),
        (b'{"kind":"\\x"}', "bad escape"),
        (b'{"kind":"abc', "unterminated string"),
        (b'{"kind" 1}', "':' expected"),
        (b"{1:2}", "object key expected"),
        (b"[" * 20 + b"]" * 20, "nested too deep"),
        (b'{"nodes":[' + b"0," * 700_000 + b"0]}", "too many values"),
        (b"tru", "invalid literal"),
    ],
)
def test_garbage_refused_with_a_reason(tmp_path: Path, data: bytes, why: str) -> None:
    f = tmp_path / "advice.json"
    f.write_bytes(data)
    out = drive("parse", str(f), str(NOW))
    assert out.startswith("refused: "), out
    assert why in out, out


def test_random_bytes_never_crash(tmp_path: Path) -> None:
    f = tmp_path / "advice.json"
    good = contract_advice().encode()
    for seed in range(200):
        rnd = os.urandom(8)
        data = bytearray(good)
        # flip a few bytes of a valid document, or truncate it
        for i in range(0, 8, 2):
            data[(rnd[i] * 257 + rnd[i + 1] + seed) % len(data)] = rnd[i + 1]
        if seed % 3 == 0:
            data = data[: (seed * 7) % len(data)]
        f.write_bytes(bytes(data))
        out = drive("parse", str(f), str(NOW))
        assert out.startswith(("refused: ", "fresh ")), out


def test_size_limit_and_file_kinds(tmp_path: Path) -> None:
    f = tmp_path / "advice.json"
    data = contract_advice().encode()  # the limit is in bytes (an app name is UTF-8)
    f.write_bytes(data)
    assert drive("load", str(f), str(NOW), str(len(data))).startswith("advice 4 nodes")
    assert drive("load", str(f), str(NOW), str(len(data) - 1)) == (
        "none: larger than its size limit (read 0 times)\n"
    )
    assert drive("load", str(tmp_path / "absent"), str(NOW), "100") == (
        "none: missing (read 0 times)\n"
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a blocking open would hang here
    t0 = time.monotonic()
    assert drive("load", str(fifo), str(NOW), "100") == "none: not a regular file (read 0 times)\n"
    assert time.monotonic() - t0 < 5
    assert drive("load", str(tmp_path), str(NOW), "100").startswith("none: not a regular file")


def test_cached_by_file_identity(tmp_path: Path) -> None:
    f = tmp_path / "advice.json"
    f.write_text(contract_advice())
    assert drive("load", str(f), str(NOW), "100000", "50") == "advice 4 nodes (read 1 times)\n"
    f.write_text("nope")
    assert drive("load", str(f), str(NOW), "100000", "50") == (
        "none: invalid literal (read 1 times)\n"
    )


def watch_sources(tmp_path: Path) -> tuple[Path, list[str]]:
    """The watcher's scenario (here and under the sanitizers): good advice, two files
    refused for the same reason, the file removed, good again twice, stale, good."""
    now = time.time()  # the watcher thread judges freshness by its own clock
    files = {
        "good": contract_advice(generated=now),
        "bad": "not json",
        "bad-too": "nope",
        "stale": contract_advice(generated=now - 3600),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    order = ["good", "bad", "bad-too", "-", "good", "good", "stale", "good"]
    return tmp_path / "advice.json", [o if o == "-" else str(tmp_path / o) for o in order]


WATCH_TRANSCRIPT = [
    "told: missing",  # the first look, before any file
    "told: advice 4 nodes",
    "held good: advice 4 nodes (change 2)",
    "told: invalid literal",
    "held bad: none (change 3)",  # the last good advice is dropped, as before
    "held bad-too: none (change 4)",  # the same reason: not told twice
    "told: missing",
    "held -: none (change 5)",
    "told: advice 4 nodes",
    "held good: advice 4 nodes (change 6)",
    "held good: advice 4 nodes (change 7)",  # a new publication: no news, read all the same
    "told: stale (older than its valid_s)",
    "held stale: none (change 8)",
    "told: advice 4 nodes",
    "held good: advice 4 nodes (change 9)",
]


def watch_transcript(out: str, tmp_path: Path) -> list[str]:
    return out.replace(f"{tmp_path}/", "").splitlines()


def test_watcher_thread_follows_the_file(tmp_path: Path) -> None:
    """The plugin's watcher thread (clavis_advice_watch.c) reads each change once and
    swaps it in; a job test holds what it swapped in, nothing else: after a refused or
    removed file none, as a job test found before the thread; one report per reason."""
    adv, sources = watch_sources(tmp_path)
    out = drive("watch", str(adv), "100000", *sources)
    assert watch_transcript(out, tmp_path) == WATCH_TRANSCRIPT


@pytest.mark.skipif(not slurm_available(), reason="needs slurmctld installed")
def test_source_script_refuses_another_version(tmp_path: Path) -> None:
    tree = tmp_path / "slurm-99.99.1"
    (tree / "src" / "common").mkdir(parents=True)
    (tree / "src" / "common" / "plugin.h").write_text("")
    (tree / "config.h").write_text('#define SLURM_VERSION_STRING "99.99.1"\n')
    cp = subprocess.run(
        [str(REPO / "slurm-plugin" / "select" / "slurm-src.sh")],
        env={**os.environ, "SLURM_SRC": str(tree)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cp.returncode == 1
    assert f"{tree} is Slurm 99.99.1 but the installed slurmctld is" in cp.stderr
    assert "must be built from the same version" in cp.stderr
    cp = subprocess.run(
        [str(REPO / "slurm-plugin" / "select" / "slurm-src.sh")],
        env={**os.environ, "SLURM_SRC": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cp.returncode == 1 and "not a configured Slurm source tree" in cp.stderr


def test_documented_snippets_are_the_tested_ones() -> None:
    """The example files say what the tests configure (minicluster.py, test_spank.py)."""
    plugin = REPO / "slurm-plugin"
    conf = dict(
        ln.split("=", 1)
        for ln in (plugin / "slurm.conf.example").read_text().splitlines()
        if ln and not ln.startswith("#")
    )
    assert conf["SelectType"] == "select/clavis"
    assert conf["PluginDir"].split(":")[0] == "/usr/lib/x86_64-linux-gnu/slurm-wlm"
    sel = dict(
        ln.split("=", 1)
        for ln in (plugin / "select_clavis.conf.example").read_text().splitlines()
        if ln and not ln.startswith("#")
    )
    assert sel == {"AdvicePath": "/run/clavis/advice.json", "AdviceMaxBytes": str(4 << 20)}
    stack = [
        ln.split()
        for ln in (plugin / "plugstack.conf.example").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    assert len(stack) == 1
    assert stack[0][0] == "optional" and stack[0][1].endswith("/spank_clavis.so")
    assert stack[0][2:] == ["socket=/run/clavis/monitor.sock", "timeout_ms=200"]
    readme = (plugin / "README.md").read_text()
    for line in (" ".join(stack[0]), *(f"{k}={v}" for k, v in {**conf, **sel}.items())):
        assert line in readme, line


def test_cost_at_20000_nodes(tmp_path: Path) -> None:
    """A 20000-node advice file (~2 MB) is read and checked in well under a second, once
    (by the watcher thread, never a job test); unchanged, each later look is a stat."""
    nodes = [
        {"node": f"r{r}h{h}c{c}", "host": f"r{r}h{h}", "rack": f"r{r}",
         "contention": "ok" if h % 3 == 0 else "devil-free",
         "node_class": "devil" if h % 3 == 0 and c == 1 else "unknown"}
        for r in range(1, 21) for h in range(1, 126) for c in range(1, 9)
    ]  # fmt: skip
    f = tmp_path / "advice.json"
    f.write_text(json.dumps({**GOOD, "nodes": nodes}))
    t0 = time.monotonic()
    assert drive("load", str(f), str(NOW), str(4 << 20)) == "advice 20000 nodes (read 1 times)\n"
    once = time.monotonic() - t0
    t0 = time.monotonic()
    out = drive("load", str(f), str(NOW), str(4 << 20), "2000")
    assert out == "advice 20000 nodes (read 1 times)\n"
    assert once < 1.0, once
    assert time.monotonic() - t0 - once < 0.5


def test_utf8_read_as_python_reads_it(tmp_path: Path) -> None:
    """Raw UTF-8 (as a writer without ensure_ascii puts it) is read like its escape."""
    f = tmp_path / "advice.json"
    for raw in (b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80"):
        name = raw.decode()
        doc = json.dumps({**GOOD, "apps": [{**GOOD["apps"][0], "app": f"1000:{name}"}]},
                         ensure_ascii=False).encode()  # fmt: skip
        f.write_bytes(doc)
        out = drive("parse", str(f), str(NOW))
        assert f"1000:{name} " in out, out


def test_memory_bounded_on_a_wide_file(tmp_path: Path) -> None:
    """A 4 MiB file of two million values is refused before its tree outgrows what the
    largest valid advice needs (about 100 MB of tree before the bound, inside
    slurmctld, at each change of the file)."""
    f = tmp_path / "advice.json"
    f.write_bytes(b'{"nodes":[' + b"0," * ((4 << 20) // 2 - 8) + b"0]}")
    probe = (
        "import resource, subprocess, sys\n"
        "out = subprocess.run(sys.argv[1:], capture_output=True, text=True).stdout\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, out)\n"
    )
    cp = subprocess.run(
        [sys.executable, "-c", probe, str(DRIVER), "parse", str(f), str(NOW)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    kib, out = cp.stdout.split(" ", 1)
    assert out.strip() == "refused: too many values"
    assert int(kib) < 64 << 10, kib
