"""``clavisd``: the head-node service process (API server, ingest writer, repack loop).

    clavisd [--config /etc/clavis/clavis.toml]

Exit codes: 0 stopped cleanly, 2 bad configuration, cluster file, key file or TLS key.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import uvicorn
from pydantic_core import to_jsonable_python

from clavis.documents import InputError, load_cluster
from clavis.model import WeightsFile
from clavis.objectives import Weights
from clavis.service import advice, maintenance, replay, snapshot
from clavis.service.advice_worker import AdviceWorker, build_document
from clavis.service.agents import MigratorClient
from clavis.service.api import serve
from clavis.service.auth import AgentAuth, SecretFileError, hash_password
from clavis.service.claims import ContainerClaims, planned_moves
from clavis.service.classify import Thresholds
from clavis.service.config import DEFAULT_PATH, Config, ConfigError, load_config
from clavis.service.gcpolicy import long_lived_heap
from clavis.service.hostpower import HostPower, containers_per_host
from clavis.service.ingest import Ingestor
from clavis.service.limits import guarded_protocol
from clavis.service.maintenance import Task
from clavis.service.pausepoints import pause_point
from clavis.service.power import FitError, fit
from clavis.service.repack import Decision, Executor, decide
from clavis.service.rows import PowerModelRow
from clavis.service.schemas import (
    ProposedPlan,
    RepackOut,
    deferred_move,
    plan_out,
    proposed_step,
)
from clavis.service.snapshot import Snapshot
from clavis.service.store import Store, StoreError
from clavis.service.tables import MIGRATIONS
from clavis.service.writer import ProcessIngestor
from clavis_contracts.keys import load_keys, private_bytes

log = logging.getLogger("clavisd")
EXIT_BAD_CONFIG = 2


class Clavisd:
    """Everything one clavisd process holds; the API and the loops call into it."""

    def __init__(self, config: Config, now: float | None = None) -> None:
        self.config = config
        self.started = now if now is not None else time.time()
        self.cluster = load_cluster(config.cluster_file)
        self.host_names = {h.name for h in self.cluster.hosts}
        self.host_cores = {h.name: h.cores for h in self.cluster.hosts}
        c = config.classify
        self.thresholds = Thresholds(c.devil_threshold_mpki, c.host_thresholds)
        self.store = Store(config.store.url, self.started)
        self.store.sync_hosts(self.cluster)
        self.schema_versions = sorted(v for v, _, _ in MIGRATIONS)
        self.auth = AgentAuth(config.security.agent_keys_file, config.security.max_skew_s,
                              self.store, self.started)  # fmt: skip
        self.last_report: dict[str, float] = self.store.last_reports()
        self.claims = ContainerClaims(((c.name, c.host) for c in self.store.containers()),
                                      config.ingest.max_report_age_s)  # fmt: skip
        self.moving = planned_moves(self.store)
        ing = config.ingest
        self.ingestor: Ingestor | ProcessIngestor
        if ing.writer == "process":
            self.ingestor = ProcessIngestor(config.store.url, config.classify, ing.batch_max,
                                            ing.batch_wait_ms / 1000)  # fmt: skip
        else:
            self.ingestor = Ingestor(self.store, config.classify, ing.batch_max,
                                     ing.batch_wait_ms / 1000)  # fmt: skip
        self.executor = Executor(
            self.store,
            MigratorClient(
                self.auth.host_key,
                config.migrator.address,
                config.migrator.timeout_s,
                config.migrator.addresses,
            ),
            config.repack,
        )
        self.dummy_hash = hash_password("not a password of any user")
        self._stop = threading.Event()
        self.tasks = self.maintenance_tasks()
        self._loop = threading.Thread(target=self._maintain, name="maintenance", daemon=True)
        self._repack_lock = threading.Lock()
        # The last advice built: its inputs and its JSON document (AdviceFile, validated).
        self._advice: tuple[object, dict[str, Any]] | None = None
        # With the ingest writer in a process, full advice builds get one too (start()).
        self._advice_worker: AdviceWorker | None = None
        self.host_power: HostPower | None = None
        if config.host_power.enabled:  # raises BmcPasswordError (exit 2) for a bad file
            engine = self.store.engine
            self.host_power = HostPower(
                config.host_power, engine, hosts=self.host_names, now=self.started,
                occupancy=lambda: containers_per_host(engine), reported=self.last_report.get,
            )  # fmt: skip

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        self.ingestor.start()
        cfg = self.config
        if cfg.ingest.writer == "process":
            self._advice_worker = AdviceWorker(
                cfg.store.url, cfg.cluster_file, cfg.ingest.max_report_age_s,
                cfg.classify, cfg.advice.valid_s,
            )  # fmt: skip
            self._advice_worker.start()
        if self.host_power is not None:
            self.host_power.start()
        resumed = self.executor.resume()
        if resumed:
            log.info("resumed plans %s", resumed)
        self._loop.start()

    def stop(self) -> None:
        self._stop.set()
        self.executor.stop()
        if self.host_power is not None:
            self.host_power.stop()
        self.ingestor.stop()
        if self._loop.is_alive():
            self._loop.join(timeout=5)
        if self._advice_worker is not None:
            self._advice_worker.stop()
        self.store.close()

    def maintenance_tasks(self) -> list[Task]:
        """The periodic tasks, each with its own period (maintenance.py): the advice every
        few seconds (well within ``advice.valid_s``), nonce pruning as often, retention
        every 10 minutes, an applying repack pass every ``repack.interval_s`` (0: none)."""
        cfg = self.config
        advice_s = min(10.0, cfg.advice.valid_s / 3)
        r = cfg.retention
        tasks = [
            Task("advice", advice_s, self.publish_advice, first_s=advice_s),
            Task("nonces", min(10.0, cfg.security.max_skew_s), self._prune_nonces,
                 first_s=advice_s),
            Task("retention", 600.0, lambda: self.store.apply_retention(
                time.time(), r.raw_s, r.keep_s, r.bucket_s), first_s=advice_s),
        ]  # fmt: skip
        if cfg.repack.interval_s > 0:
            interval = cfg.repack.interval_s
            tasks.append(Task("repack", interval, self._repack_pass, first_s=interval))
        return tasks

    def _maintain(self) -> None:
        maintenance.loop(self.tasks, self._stop)

    def _prune_nonces(self) -> None:
        self.store.drop_nonces(self.auth.keep_since(time.time()))

    def _repack_pass(self) -> None:
        out = self.repack_once(apply=True)
        log.info("repack decision=%s %s", out.decision, out.message)

    # --- actions ----------------------------------------------------------------------

    def snapshot(self, now: float) -> snapshot.Snapshot:
        return snapshot.take(
            self.cluster,
            hosts=self.store.hosts(),
            containers=self.store.containers(),
            power_models=self.store.power_models(),
            now=now,
            fresh_s=self.config.ingest.max_report_age_s,
            thresholds=self.thresholds,
            not_on=self.host_power.not_on() if self.host_power is not None else frozenset(),
        )

    def publish_advice(self) -> None:
        """Rebuild the advice only when what it depends on changed (placement, classes,
        intensity votes, hosts gone quiet); otherwise re-issue it with a new time. A full
        build scores the cluster through the evaluator, about a second of the API
        process's interpreter at 1000 hosts: too much to repeat every few seconds."""
        now = time.time()
        cfg = self.config
        fresh_s = cfg.ingest.max_report_age_s
        quiet = frozenset(h for h in self.host_names
                          if now - self.last_report.get(h, -1e18) > fresh_s)  # fmt: skip
        # hosts switched off (or switching) are unavailable at once, not when reports stop
        down = self.host_power.powered_down() if self.host_power is not None else frozenset()
        inputs = (quiet, down, self.store.app_classes_version(), tuple(
            # a container's intensity matters here only by the vote it casts
            (r.name, r.host, r.job, r.cores, r.memory_bytes, r.klass, r.class_hint,
             self.thresholds.vote(r.host, r.intensity_mpki))
            for r in self.store.placement_inputs()
        ))  # fmt: skip
        if self._advice is None or self._advice[0] != inputs:
            worker = self._advice_worker
            if worker is not None and not worker.alive():
                log.error("advice process is gone; building the advice in clavisd instead")
                worker = self._advice_worker = None
            if worker is not None:
                doc = worker.build(now, down)
            else:
                doc = build_document(
                    self.store, self.cluster, now,
                    fresh_s=fresh_s, classify=cfg.classify, valid_s=cfg.advice.valid_s,
                    down=down,
                )  # fmt: skip
            self._advice = (inputs, doc)
        generated = to_jsonable_python(dt.datetime.fromtimestamp(now, dt.UTC))
        advice.publish_document(
            cfg.advice.path, {**self._advice[1], "generated": generated},
            mode=cfg.advice.file_mode, gid=cfg.advice.file_gid,
        )  # fmt: skip

    def weights(self) -> tuple[Weights, Literal["calibrated", "configured"]]:
        w, source, _ = self.current_weights()
        return w, source

    def current_weights(self) -> tuple[Weights, Literal["calibrated", "configured"], int | None]:
        """The newest stored weights file (and its id), else repack.default_weights."""
        row = self.store.current_weights()
        if row is not None:
            w = WeightsFile.model_validate_json(row[1]).weights
            return Weights(w.P, w.D, w.C, w.M), "calibrated", row[0]
        return Weights(*self.config.repack.default_weights), "configured", None

    def fit_power_models(self, now: float) -> tuple[list[PowerModelRow], dict[str, str]]:
        fitted, refused = [], {}
        since = now - self.config.retention.keep_s
        for h in self.cluster.hosts:
            x, y = self.store.power_samples(h.name, since)
            try:
                f = fit(x, y)
            except FitError as exc:
                refused[h.name] = str(exc)
                continue
            self.store.save_power_model(h.name, f, now)
            fitted.append(self.store.power_models()[h.name])
        return fitted, refused

    def repack_once(self, apply: bool) -> RepackOut:
        busy = RepackOut(decision="busy", f_current=None, f_target=None, plan=None,
                         proposal=None,
                         message="a repack or a plan is already running")  # fmt: skip
        if not self._repack_lock.acquire(blocking=False):
            return busy
        try:
            if self.executor.busy():
                return busy
            now = time.time()
            weights, source, weights_id = self.current_weights()
            snap = self.snapshot(now)
            d = decide(snap, weights, self.config.repack)
            if d.plan is None:
                return RepackOut(decision=d.decision, f_current=d.f_current,
                                 f_target=d.f_target, message=d.message, plan=None,
                                 proposal=None)  # fmt: skip
            steps = d.plan.steps
            deferred = [deferred_move(m) for m in d.plan.deferred]
            f_current, f_target = d.f_current or 0.0, d.f_target or 0.0
            f_solver = d.f_solver if d.f_solver is not None else f_target
            summary = {"message": d.message, "contended": list(d.contended),
                       "deferred": [m.model_dump() for m in deferred], "f_solver": f_solver,
                       "weights": list(weights.as_tuple())}  # fmt: skip
            if d.raw_current is not None and d.raw_target is not None:
                objectives = {"before": asdict(d.raw_current), "after": asdict(d.raw_target)}
                if d.raw_solver is not None:
                    objectives["solver"] = asdict(d.raw_solver)
                summary["objectives"] = objectives
            record = self._replay_record(snap, d, weights, source=source, weights_id=weights_id,
                                         now=now)  # fmt: skip
            if not apply or d.decision == "deferred":
                # Shown, not stored; an older pending plan stays. A deferred decision has
                # nothing worth starting even with apply. Its replay record goes with it.
                shown = {**summary, "replay": json.loads(replay.encode(record))}
                proposal = ProposedPlan(f_current=f_current, f_target=f_target,
                                        f_solver=f_solver, summary=shown,
                                        steps=[proposed_step(s) for s in steps],
                                        deferred=deferred)  # fmt: skip
                note = "" if d.decision == "deferred" else "; dry run: nothing stored"
                return RepackOut(decision=d.decision, f_current=d.f_current,
                                 f_target=d.f_target, message=d.message + note, plan=None,
                                 proposal=proposal)  # fmt: skip
            for old in self.store.plans(["pending"]):
                self.store.set_plan(old.id, "superseded", "a newer plan replaced it", now)
            # Stored as running: a restart after a crash from here on resumes it.
            plan_id = self.store.create_plan(
                f_current, f_target, summary, steps, now, state="running",
                replay=lambda plan: replay.encode(record.model_copy(update={"plan": plan})),
            )  # fmt: skip
            pause_point("plan-created")
            try:
                self.executor.start(plan_id)
            except Exception as exc:
                # A running plan with no thread would be resumed at the next start beside
                # newer plans; a failed one is never sent again.
                self.store.set_plan(plan_id, "failed", f"not started: {exc!r}", time.time())
                raise
            p = self.store.plan(plan_id)
            assert p is not None  # stored above, and plans are never deleted
            out = plan_out(p, self.store.steps(plan_id))
            message = p.message or d.message
            return RepackOut(decision="planned", f_current=d.f_current, f_target=d.f_target,
                             message=message, plan=out, proposal=None)  # fmt: skip
        finally:
            self._repack_lock.release()

    def _replay_record(
        self, snap: Snapshot, d: Decision, weights: Weights, *,
        source: Literal["calibrated", "configured"], weights_id: int | None, now: float,
    ) -> replay.ReplayRecord:  # fmt: skip
        """What this plan was made from (replay.py): the documents decide gave the solver,
        the weights, the resolved options and the solver's answer."""
        assert snap.workload is not None and d.solved is not None and d.options is not None
        assert d.decision in ("planned", "deferred")
        return replay.record_of(
            cluster=snap.cluster, workload=snap.workload, current=snap.current,
            weights=weights, weights_source=source, weights_id=weights_id,
            method=self.config.repack.method, options=d.options, result=d.solved,
            decision=d.decision, margin=self.config.repack.margin, made=now,
        )  # fmt: skip

    def start_plan(self, plan_id: int) -> None:
        self.executor.start(plan_id)


def build(config_path: Path) -> Clavisd:
    config = load_config(config_path)
    # Every private file is checked before the store is opened (Clavisd reads the keys).
    load_keys(config.security.agent_keys_file)
    if config.server.tls_key_file is not None:
        private_bytes(config.server.tls_key_file, "TLS key")
    return Clavisd(config)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="clavisd", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--config", default=str(DEFAULT_PATH), help=f"default {DEFAULT_PATH}")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")  # fmt: skip
    try:
        d = build(Path(args.config))
    except (ConfigError, SecretFileError, InputError, StoreError) as exc:
        print(f"clavisd: error: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    # The ingest writer thread and the event loop share the GIL; a shorter switch interval
    # hands it over sooner when one blocks in C (SQLite, SHA-256), which measurably raises
    # ingest throughput (docs/benchmarks.md, ingest).
    sys.setswitchinterval(0.0005)
    d.start()
    long_lived_heap()
    try:
        srv = d.config.server
        tls = (
            {}
            if srv.tls_cert_file is None
            else {"ssl_certfile": str(srv.tls_cert_file), "ssl_keyfile": str(srv.tls_key_file)}
        )
        uvicorn.run(serve(d), host=srv.listen, port=srv.port, log_level=args.log_level,
                    access_log=False, proxy_headers=False,
                    http=guarded_protocol(srv.header_timeout_s), **tls)  # type: ignore[arg-type]  # fmt: skip
    finally:
        d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
