"""The agent's HTTP API: signatures, malformed input, unknown steps; the config file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from clavis_contracts.keys import AgentKey, peer_step_secret, unwrap_peer_secret
from clavis_contracts.signing import sign
from clavis_migrator.cli import main
from clavis_migrator.config import ConfigError, load, parse

from .world import KEYS, call, keyed, make_agent, step, table, write_key_file


def test_requests_must_be_signed_with_this_hosts_key(tmp_path: Path) -> None:
    a1, _ = make_agent(tmp_path, "h1", table("c1"))
    h1 = KEYS["h1"]
    try:
        body = keyed(step(1)).model_dump_json().encode()
        code, doc = call(a1.port, "POST", "/api/v1/steps", body, headers={})
        assert code == 401 and "missing" in doc["error"]
        forged = AgentKey(id="h1-k1", host="h1", secret="x" * 20)
        code, doc = call(a1.port, "POST", "/api/v1/steps", body, key=forged)
        assert code == 401 and "does not match" in doc["error"]
        # another host's key is unknown here
        code, doc = call(a1.port, "POST", "/api/v1/steps", body, key=KEYS["h2"])
        assert code == 401 and "unknown key id" in doc["error"]
        # the old shared secret (no key id) opens nothing
        code, doc = call(a1.port, "POST", "/api/v1/steps", body,
                         headers=sign(b"migrator-test-secret-0123456789", "POST",
                                      "/api/v1/steps", body, time.time()))  # fmt: skip
        assert code == 401 and "X-Clavis-Key-Id" in doc["error"]
        # a replay of a good request is refused
        headers = sign(h1.secret_bytes, "GET", "/api/v1/steps/1:0", b"", time.time(), key_id=h1.id)
        assert call(a1.port, "GET", "/api/v1/steps/1:0", headers=headers)[0] == 404
        code, doc = call(a1.port, "GET", "/api/v1/steps/1:0", headers=headers)
        assert code == 401 and "replayed" in doc["error"]
        # signed before the agent started (its nonces are in memory only)
        old = sign(h1.secret_bytes, "GET", "/api/v1/steps/1:0", b"", a1.http_started - 5,
                   key_id=h1.id)  # fmt: skip
        code, doc = call(a1.port, "GET", "/api/v1/steps/1:0", headers=old)
        assert code == 401 and "before this service started" in doc["error"]
        # the body is covered: the signature of another body does not do
        other = sign(h1.secret_bytes, "POST", "/api/v1/steps", b"{}", time.time(), key_id=h1.id)
        assert call(a1.port, "POST", "/api/v1/steps", body, headers=other)[0] == 401
        # a step without its peer key is refused (the agent could not reach its target)
        bare = step(1).model_dump_json().encode()
        code, doc = call(a1.port, "POST", "/api/v1/steps", bare)
        assert code == 422 and "no peer key" in doc["error"]
        assert a1.store.all() == []
    finally:
        a1.stop()


def test_host_and_peer_keys_reach_their_own_paths_only(tmp_path: Path) -> None:
    a2, _ = make_agent(tmp_path, "h2", table("c1"))
    try:
        # clavisd's key (h2's) is refused on the agent-to-agent paths
        path = "/api/v1/peer/steps/1:0/abort"
        code, doc = call(a2.port, "POST", path, key=KEYS["h2"])
        assert code == 401 and "does not reach the peer paths" in doc["error"]
        # the peer key of step 1:0 (from h1) works on 1:0 and on no other step
        s = keyed(step(a2.port))
        assert s.peer_key_id == "peer:h2-k1:h1"
        secret = unwrap_peer_secret(KEYS["h1"], s.step_id, s.peer_key or "")

        def peer_call(p: str) -> tuple[int, dict[str, object]]:
            h = sign(secret, "POST", p, b"", time.time(), key_id=s.peer_key_id or "")
            return call(a2.port, "POST", p, headers=h)

        assert peer_call(path)[0] != 401  # authentic (what abort does with it is its own)
        code, doc = peer_call("/api/v1/peer/steps/1:1/abort")
        assert code == 401 and "does not match" in doc["error"]
        code, doc = peer_call("/api/v1/steps")
        assert code == 401 and "own step's peer paths" in doc["error"]
        # a peer key claimed as from another source host does not verify
        h = sign(secret, "POST", path, b"", time.time(), key_id="peer:h2-k1:h3")
        assert call(a2.port, "POST", path, headers=h)[0] == 401
    finally:
        a2.stop()


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
        # a peer upload that climbs out of its directory (signed as step 1:0's source, h2)
        path = "/api/v1/peer/steps/1:0/files/..%2Fx?offset=0"
        secret = peer_step_secret(KEYS["h1"], "1:0", "h2")
        h = sign(secret, "PUT", path, b"x", time.time(), key_id="peer:h1-k1:h2")
        code, doc = call(a1.port, "PUT", path, b"x", headers=h)
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
    key = write_key_file(tmp_path / "key.toml", KEYS["h1"])
    cfg.write_text(f'host = "h2"\nkey_file = "{key}"\nstate_dir = "{tmp_path / "s"}"\n')
    assert main(["--config", str(cfg), "--check-config"]) == 0
    key.chmod(0o644)
    assert main(["--config", str(cfg)]) == 1
    assert "chmod 600" in capsys.readouterr().err
    key.chmod(0o600)  # private now, but h1's key on host h2
    assert main(["--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "not this host 'h2'" in err and KEYS["h1"].secret not in err


def test_the_sample_config_is_the_defaults() -> None:
    sample = Path(__file__).resolve().parents[3] / "deploy" / "config" / "migrator.toml.sample"
    assert load(sample) == parse({})
