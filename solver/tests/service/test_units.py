"""Pure pieces of clavisd: hysteresis, power fit, plan ordering, config loading."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clavis.service.agents import MigratorClient
from clavis.service.classify import (
    ClassState,
    Hysteresis,
    job_class,
    observe,
    remembered,
    threshold_for,
    vote,
)
from clavis.service.config import ConfigError, load_config
from clavis.service.plan import Move, moves_between, order, peak_loads
from clavis.service.power import FitError, fit


def test_hysteresis_needs_seven_of_ten_and_ignores_missing_counters() -> None:
    rule = Hysteresis(10, 7)
    s = ClassState()
    for k in ["devil"] * 6 + [None] * 5:  # unsupported samples cast no vote
        s = observe(s, k, rule)  # type: ignore[arg-type]
    assert s.klass is None and s.votes == "dddddd"
    s = observe(s, "devil", rule)
    assert (s.klass, s.source) == ("devil", "samples")
    for _ in range(3):  # alternating noise never flips it
        s = observe(observe(s, "turtle", rule), "devil", rule)
    assert s.klass == "devil" and len(s.votes) == 10
    with pytest.raises(ValueError, match="votes"):
        Hysteresis(5, 7)


def test_class_helpers() -> None:
    assert vote(None, 4.5) is None and vote(4.5, 4.5) == "devil" and vote(4.4, 4.5) == "turtle"
    assert remembered("devil") == ClassState("devil", "memory", "")
    assert remembered(None) == ClassState()


def test_a_remembered_class_becomes_measured_once_the_window_confirms_it() -> None:
    rule = Hysteresis(10, 7)
    s = remembered("turtle")
    for _ in range(6):
        s = observe(s, "turtle", rule)
    assert (s.klass, s.source) == ("turtle", "memory")  # 6 of 7 votes: still assumed
    s = observe(s, "turtle", rule)
    assert (s.klass, s.source) == ("turtle", "samples")
    s = remembered("turtle")  # measured otherwise: the window flips it, from samples
    for _ in range(7):
        s = observe(s, "devil", rule)
    assert (s.klass, s.source) == ("devil", "samples")
    assert job_class(["turtle", "devil"]) == "devil"
    assert job_class(["turtle", None]) is None and job_class(["turtle"]) == "turtle"
    assert threshold_for("amd-7", 4.5, {"amd": 3.0, "amd-7": 2.0}) == 2.0
    assert threshold_for("intel-1", 4.5, {"amd": 3.0}) == 4.5


def test_power_fit_recovers_a_line_and_refuses_flat_data() -> None:
    x = [0, 1, 2, 4, 8, 8, 3]
    f = fit(x, [120 + 7.5 * v for v in x])
    assert abs(f.idle_w - 120) < 1e-9 and abs(f.slope_w - 7.5) < 1e-9
    assert f.r2 == pytest.approx(1.0) and f.rmse_w < 1e-9 and f.peak_w(8) == pytest.approx(180)
    noisy = fit(x, [120 + 7.5 * v + (3 if i % 2 else -3) for i, v in enumerate(x)])
    assert 0.8 < noisy.r2 < 1 and noisy.rmse_w > 2
    with pytest.raises(FitError, match="spans"):
        fit([2.0] * 6, [150.0] * 6)
    with pytest.raises(FitError, match="need at least 5"):
        fit([1, 2], [3, 4])


def test_plan_frees_space_first_and_stages_a_swap() -> None:
    cores = {"a": 4, "b": 4, "c": 2}
    current = {"a": "h1", "b": "h2", "c": "h3"}
    capacity = {"h1": 4, "h2": 4, "h3": 4}
    # a and b swap between two full hosts: neither can go first. h3 has only 2 cores
    # free, too few to stage either, so both moves are deferred and nothing is planned.
    target = {"a": "h2", "b": "h1", "c": "h3"}
    moves = moves_between(current, target, cores, dict.fromkeys(cores, 1))
    p = order(moves, capacity=capacity, current=current, cores=cores, parallelism=2,
              staging_hosts={"h1", "h2", "h3"})  # fmt: skip
    assert {m.container for m in p.deferred} == {"a", "b"} and p.steps == ()
    # With an empty h4, one of them is staged there and the swap completes.
    capacity["h4"] = 8
    p = order(moves, capacity=capacity, current=current, cores=cores, parallelism=2,
              staging_hosts=set(capacity))  # fmt: skip
    assert p.deferred == ()
    hops = [(s.move.container, s.move.source, s.move.target) for s in p.steps]
    assert hops[0][2] == "h4" and len(hops) == 3  # staged once, then the swap completes
    assert all(v <= capacity[h] for h, v in peak_loads(p, capacity, current, cores).items())


@st.composite
def _instances(
    draw: st.DrawFn,
) -> tuple[dict[str, int], dict[str, str], dict[str, str], dict[str, int]]:
    hosts = {f"h{i}": draw(st.integers(2, 8)) for i in range(draw(st.integers(2, 5)))}
    cores: dict[str, int] = {}
    current: dict[str, str] = {}
    target: dict[str, str] = {}
    free_now, free_then = dict(hosts), dict(hosts)
    for i in range(draw(st.integers(0, 12))):
        c = draw(st.integers(1, 4))
        a = draw(st.sampled_from(sorted(hosts)))
        b = draw(st.sampled_from(sorted(hosts)))
        if free_now[a] >= c and free_then[b] >= c:
            free_now[a] -= c
            free_then[b] -= c
            cores[f"c{i}"], current[f"c{i}"], target[f"c{i}"] = c, a, b
    return hosts, current, target, cores


@settings(max_examples=150, deadline=None)
@given(_instances(), st.integers(1, 3))
def test_plans_never_overload_a_host(
    inst: tuple[dict[str, int], dict[str, str], dict[str, str], dict[str, int]], par: int
) -> None:
    capacity, current, target, cores = inst
    moves = moves_between(current, target, cores, dict.fromkeys(cores, 1))
    p = order(moves, capacity=capacity, current=current, cores=cores, parallelism=par,
              staging_hosts=set(capacity))  # fmt: skip
    peaks = peak_loads(p, capacity, current, cores)
    assert all(v <= capacity[h] for h, v in peaks.items())
    assert all(sum(1 for s in p.steps if s.wave == w) <= par for w in range(p.waves))
    # Every move is planned (ending on its target) or deferred (left where it is).
    end = dict(current)
    for s in p.steps:
        assert end[s.move.container] == s.move.source
        end[s.move.container] = s.move.target
    deferred = {m.container for m in p.deferred}
    assert all(end[c] == (current[c] if c in deferred else target[c]) for c in current)
    assert all(isinstance(m, Move) for m in moves)


def test_config_lists_every_problem(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('bogus = 1\n[repack]\nmargin = 2\n[server]\nport = "x"\n'
                   '[migrator]\naddress = "{host}:99999"\n')  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    text = str(err.value)
    assert "bogus" in text and "repack.margin" in text and "server.port" in text
    assert "migrator.address" in text and "'{host}:99999' is not host:port" in text
    for good in ("{host}:7781", "127.0.0.1:9", "[::1]:7781", "{host}.agents.example:80"):
        cfg.write_text(f'[migrator]\naddress = "{good}"\n')
        assert load_config(cfg).migrator.address == good
    for bad in ("{host}", "{host}:", ":7781", "{host}:x", "{host}:0"):
        cfg.write_text(f'[migrator]\naddress = "{bad}"\n')
        with pytest.raises(ConfigError, match=r"migrator\.address"):
            load_config(cfg)
    cfg.write_text('[migrator.addresses]\nr1h1 = "10.0.0.1:7781"\n')
    assert load_config(cfg).migrator.addresses == {"r1h1": "10.0.0.1:7781"}
    cfg.write_text('[migrator.addresses]\nr1h1 = "10.0.0.1"\n')
    with pytest.raises(ConfigError, match=r"migrator\.addresses.*r1h1.*not host:port"):
        load_config(cfg)
    cfg.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(cfg)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    cfg.write_text('[store]\nurl = "sqlite://"\n')
    with pytest.raises(ConfigError, match="in-memory SQLite"):
        load_config(cfg)
    cfg.write_text("")
    assert load_config(cfg).repack.interval_s == 60


def test_migrator_client_per_host_addresses() -> None:
    c = MigratorClient(lambda _: None, "{host}:7781", 1.0, {"r1h1": "10.213.1.11:7781"})
    assert c.address("r1h1") == "10.213.1.11:7781"
    assert c.address("r2h2") == "r2h2:7781"
