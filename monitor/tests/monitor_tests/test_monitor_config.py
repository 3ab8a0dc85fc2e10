"""The config file: defaults, every problem listed at once, the CLI's exit codes."""

from __future__ import annotations

import dataclasses
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from clavis_monitor.cli import main
from clavis_monitor.config import Config, ConfigError, load, parse

from .clavisd import KEY, write_key_file

REPO = Path(__file__).resolve().parents[3]


def test_defaults_are_the_documented_ones() -> None:
    cfg = parse({})
    assert cfg.interval_s == 1.0
    assert cfg.registration.socket == "/run/clavis/monitor.sock"
    assert cfg.power.methods == ("ipmi-dcmi", "ipmi-sensor", "rapl")
    assert cfg.traffic.table == "clavis_monitor"
    assert isinstance(cfg, Config)


def test_every_problem_is_listed(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text(
        'interval_s = "fast"\nbogus = 1\n[power]\nmethods = ["smoke"]\n'
        '[perf]\nraw_events = {llc_misses = "zz"}\n[clavisd]\nurl = "ftp://x"\n'
    )
    with pytest.raises(ConfigError) as err:
        load(f)
    msg = str(err.value)
    for needle in (
        "interval_s: expected float",
        "bogus: unknown option",
        "power.methods",
        "perf.raw_events.llc_misses",
        "clavisd.url",
    ):
        assert needle in msg, msg


def test_ipmitool_is_an_argument_list() -> None:
    assert parse({}).power.ipmitool == ("ipmitool",)
    prefixed = ["nsenter", "--net=/run/netns/mgmt", "ipmitool"]
    assert parse({"power": {"ipmitool": prefixed}}).power.ipmitool == tuple(prefixed)
    for bad, needle in (("ipmitool", "power.ipmitool: expected tuple"), ([], "empty command")):
        with pytest.raises(ConfigError) as err:
            parse({"power": {"ipmitool": bad}})
        msg = str(err.value)
        assert needle in msg, msg


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("interval_s = -1\n")
    assert main(["--config", str(bad)]) == 2
    assert "interval_s" in capsys.readouterr().err
    latin = tmp_path / "latin1.toml"
    latin.write_bytes("# r\xe9glage\ninterval_s = 5\n".encode("latin-1"))
    assert main(["--config", str(latin)]) == 2
    assert f"{latin}: not UTF-8" in capsys.readouterr().err
    key = write_key_file(tmp_path / "key.toml", KEY)
    key.chmod(0o644)
    good = tmp_path / "good.toml"
    good.write_text(
        f'host = "h1"\n[clavisd]\nkey_file = "{key}"\n[spool]\ndir = "{tmp_path}/spool"\n'
    )
    assert main(["--config", str(good), "--check-config"]) == 0
    assert main(["--config", str(good)]) == 1
    assert "chmod 600" in capsys.readouterr().err
    # A key that speaks for another host: the monitor cannot sign this host's reports.
    key.chmod(0o600)
    good.write_text(good.read_text().replace('host = "h1"', 'host = "h2"'))
    assert main(["--config", str(good)]) == 1
    err = capsys.readouterr().err
    assert "not this host 'h2'" in err and KEY.secret not in err


def test_the_sample_config_is_the_defaults() -> None:
    sample = REPO / "deploy" / "config" / "monitor.toml.sample"
    cfg = load(sample)
    assert cfg == parse({"host": cfg.host})


def test_a_busy_metrics_port_stops_the_start_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = write_key_file(tmp_path / "key.toml", KEY)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = tmp_path / "m.toml"
        cfg.write_text(
            f'host = "h1"\n[clavisd]\nkey_file = "{key}"\n[spool]\ndir = "{tmp_path}/spool"\n'
            f'[registration]\nsocket = "{tmp_path}/m.sock"\n[metrics]\nport = {port}\n'
            '[traffic]\nbackend = "none"\n'
        )
        assert main(["--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert f"cannot start: /metrics on 127.0.0.1:{port}" in err, err
    assert not (tmp_path / "m.sock").exists()  # nothing of the agent stays


def _toml(value: Any) -> str:
    """A default as the docs write it (TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def test_docs_list_every_option_with_its_default() -> None:
    """docs/monitor.md has a table per config section; each option's row must give the
    default the code has (the host name's default is described, not a value)."""
    text = (REPO / "docs" / "monitor.md").read_text()
    tables: dict[str, dict[str, str]] = {}
    section = None
    for line in text.splitlines():
        head = re.match(r"^### (?:Top level|`\[(\w+)\]`)", line)
        if head:
            section = head.group(1) or ""
            tables[section] = {}
        elif line.startswith("## "):
            section = None
        elif section is not None and (row := re.match(r"^\| `(\w+)` \| ([^|]+) \|", line)):
            tables[section][row.group(1)] = row.group(2)
    defaults = Config()
    for f in dataclasses.fields(Config):
        value = getattr(defaults, f.name)
        if dataclasses.is_dataclass(value):
            rows = tables.get(f.name)
            assert rows is not None, f"docs/monitor.md has no [{f.name}] table"
            for sub in dataclasses.fields(value):
                cell = rows.get(sub.name)
                assert cell is not None, f"{f.name}.{sub.name} is not documented"
                want = f"`{_toml(getattr(value, sub.name))}`"
                assert want in cell, f"{f.name}.{sub.name}: docs say {cell.strip()}, code {want}"
            assert set(rows) == {s.name for s in dataclasses.fields(value)}, f.name
        elif f.name != "host":
            assert f"`{_toml(value)}`" in tables[""][f.name], f.name
    assert "host" in tables[""]
