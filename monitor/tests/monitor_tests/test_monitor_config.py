"""The config file: defaults, every problem listed at once, the CLI's exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from clavis_monitor.cli import main
from clavis_monitor.config import Config, ConfigError, load, parse


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


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("interval_s = -1\n")
    assert main(["--config", str(bad)]) == 2
    assert "interval_s" in capsys.readouterr().err
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123\n")
    secret.chmod(0o644)
    good = tmp_path / "good.toml"
    good.write_text(f'[clavisd]\nsecret_file = "{secret}"\n[spool]\ndir = "{tmp_path}/spool"\n')
    assert main(["--config", str(good), "--check-config"]) == 0
    assert main(["--config", str(good)]) == 1
    assert "chmod 600" in capsys.readouterr().err


def test_the_sample_config_is_the_defaults() -> None:
    sample = Path(__file__).resolve().parents[3] / "deploy" / "config" / "monitor.toml.sample"
    cfg = load(sample)
    assert cfg == parse({"host": cfg.host})
