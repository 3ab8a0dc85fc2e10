"""The agent's HTTP API: signatures, malformed input, unknown steps; the config file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from clavis_contracts.signing import sign
from clavis_migrator.cli import main
from clavis_migrator.config import ConfigError, load, parse

from .world import SECRET, call, make_agent, step, table


def test_requests_must_be_signed_with_the_secret(tmp_path: Path) -> None:
    a1, _ = make_agent(tmp_path, "h1", table("c1"))
    try:
        body = step(1).model_dump_json().encode()
        code, doc = call(a1.port, "POST", "/api/v1/steps", body, headers={})
        assert code == 401 and "missing" in doc["error"]
        code, doc = call(a1.port, "POST", "/api/v1/steps", body, secret=b"x" * 20)
        assert code == 401 and "does not match" in doc["error"]
        # a replay of a good request is refused
        headers = sign(SECRET, "GET", "/api/v1/steps/1:0", b"", time.time())
        assert call(a1.port, "GET", "/api/v1/steps/1:0", headers=headers)[0] == 404
        code, doc = call(a1.port, "GET", "/api/v1/steps/1:0", headers=headers)
        assert code == 401 and "replayed" in doc["error"]
        # signed before the agent started (its nonces are in memory only)
        old = sign(SECRET, "GET", "/api/v1/steps/1:0", b"", a1.http_started - 5)
        code, doc = call(a1.port, "GET", "/api/v1/steps/1:0", headers=old)
        assert code == 401 and "before this service started" in doc["error"]
        # the body is covered: the signature of another body does not do
        other = sign(SECRET, "POST", "/api/v1/steps", b"{}", time.time())
        assert call(a1.port, "POST", "/api/v1/steps", body, headers=other)[0] == 401
        assert a1.store.all() == []
    finally:
        a1.stop()


def test_malformed_steps_and_unknown_resources(tmp_path: Path) -> None:
    a1, _ = make_agent(tmp_path, "h1", table("c1"))
    try:
        code, doc = call(a1.port, "POST", "/api/v1/steps", b'{"step_id": "1:0"}')
        assert code == 422 and "not a migration step" in doc["error"]
        bad = json.loads(step(1).model_dump_json()) | {"target": "h1"}
        code, doc = call(a1.port, "POST", "/api/v1/steps", json.dumps(bad).encode())
        assert code == 422 and "source and target are the same host" in doc["error"]
        assert call(a1.port, "GET", "/api/v1/steps/9:9")[0] == 404
        assert call(a1.port, "GET", "/api/v1/nothing")[0] == 404
        # a peer upload that climbs out of its directory
        code, doc = call(a1.port, "PUT", "/api/v1/peer/steps/1:0/files/..%2Fx?offset=0", b"x")
        assert code == 409 and "not prepared" in doc["error"]
        assert a1.store.all() == []
    finally:
        a1.stop()


def test_config_lists_every_problem_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        parse(
            {"port": 70000, "state_dir": "rel", "colour": "red", "chunk_bytes": 1,
             "lxc": {"dump_options": ["mntns-compat-mode"], "criu": "criu", "timeout_s": "x"}}
        )  # fmt: skip
    msg = str(exc.value)
    for part in (
        "port: must be within", "state_dir: not an absolute path", "colour: unknown option",
        "chunk_bytes", "lxc.dump_options: criu dump refuses", "lxc.criu: not an absolute",
        "lxc.timeout_s: expected float",
    ):  # fmt: skip
        assert part in msg, (part, msg)
    cfg = tmp_path / "m.toml"
    cfg.write_text('host = "r1h1"\nport = 7790\n[lxc]\nnetns_sysfs = true\n')
    got = load(cfg)
    assert got.host == "r1h1" and got.port == 7790 and got.lxc.netns_sysfs
    assert got.lxc.restore_options == ("tcp-established", "mntns-compat-mode")
    cfg.write_text("port = \n")
    with pytest.raises(ConfigError, match="not TOML"):
        load(cfg)


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "m.toml"
    cfg.write_text("port = -1\n")
    assert main(["--config", str(cfg)]) == 2
    assert "bad config: port" in capsys.readouterr().err
    cfg.write_text(f'secret_file = "{tmp_path / "secret"}"\nstate_dir = "{tmp_path / "s"}"\n')
    assert main(["--config", str(cfg), "--check-config"]) == 0
    (tmp_path / "secret").write_bytes(SECRET)
    (tmp_path / "secret").chmod(0o644)
    assert main(["--config", str(cfg)]) == 1
    assert "chmod 600" in capsys.readouterr().err


def test_the_sample_config_is_the_defaults() -> None:
    sample = Path(__file__).resolve().parents[3] / "deploy" / "config" / "migrator.toml.sample"
    assert load(sample) == parse({})
