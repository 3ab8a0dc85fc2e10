"""The step machine on the source host: accept, check, checkpoint, transfer, restore, commit.

States are the contract's (clavis_contracts.migration): ``accepted`` when the record is on
disk, ``running`` from the first action, then ``done`` (committed on the target),
``failed`` (refused or broke before anything moved: the container never stopped) or
``rolled_back`` (it stopped, and runs again on the source). Each phase is written to disk
before it starts (store.py), so an agent restarted in the middle of a step recovers it
(``recover``): before ``committing`` it undoes it (the target kills what it restored and
drops its images; the source restores its own images unless the container still runs),
from ``committing`` on it finishes the commit. No step id runs twice.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clavis_contracts import MigrationStep
from clavis_migrator import precopy
from clavis_migrator.backend import Backend, BackendError, NotVerifiedError
from clavis_migrator.hooks import run_hook
from clavis_migrator.incoming import PRECOPY_DIR, sha256_file
from clavis_migrator.pause import pause_point
from clavis_migrator.peer import PeerClient, PeerError, PeerForgedError, PeerRefusedError
from clavis_migrator.store import StepRecord, StepStore, now

log = logging.getLogger("clavis_migrator.steps")

# a step -> the client of its target agent, keyed for that step (clavis_contracts.keys)
PeerFactory = Callable[[MigrationStep], PeerClient]


class StepFailedError(Exception):
    """A phase failed; ``rollback`` says whether the container has stopped."""


class Machine:
    def __init__(
        self,
        host: str,
        *,
        store: StepStore,
        backend: Backend,
        peer: PeerFactory,
        outgoing: Path,
        chunk_bytes: int,
        transfer_attempts: int,
        network_hook: tuple[str, ...] = (),
        precopy_rounds: int = 0,
        lease_s: float = 600.0,
        fence_margin_s: float = 63.0,
        doubt_s: float = 600.0,
    ) -> None:
        # Fencing (docs/migrator.md): a target kills a restored copy not committed within
        # lease_s of the restore's request; the source rolls back without its word only
        # fence_margin_s (the clocks' allowed skew and one sweep) after that, and asks an
        # unreachable target how a commit ended for doubt_s more before it gives up.
        self.lease_s = lease_s
        self.fence_margin_s = fence_margin_s
        self.doubt_s = doubt_s
        self.network_hook = network_hook
        self.precopy_rounds = precopy_rounds
        self.host = host
        self.store = store
        self.backend = backend
        self.peer = peer
        self.outgoing = outgoing
        self.outgoing.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.chunk_bytes = chunk_bytes
        self.transfer_attempts = transfer_attempts
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}

    # ------------------------------------------------------------ admission

    def submit(self, step: MigrationStep) -> StepRecord:
        """The POST: a known id is a status query; a new one is checked, stored, started."""
        with self._lock:
            old = self.store.get(step.step_id)
            if old is not None:
                if old.step != step:
                    log.warning("step %s re-sent with other content; ignored", step.step_id)
                return old
            reason = self._refusal(step)
            if reason:
                log.info("step %s refused: %s", step.step_id, reason)
                return self.store.add(step, "failed", f"refused: {reason}")
            rec = self.store.add(step, "accepted")
            self._start(rec)
            return rec

    def _refusal(self, step: MigrationStep) -> str:
        if step.source != self.host:
            return f"this agent is host {self.host}, not the step's source {step.source}"
        busy = [
            r.step.step_id
            for r in self.store.all()
            if r.step.container == step.container and not r.terminal
        ]
        if busy:
            return f"container {step.container} is already being moved by step {busy[0]}"
        try:
            if step.container not in self.backend.running():
                if self.backend.known(step.container):
                    return f"container {step.container} does not run on {self.host}"
                return f"container {step.container} is unknown on {self.host}"
        except BackendError as exc:  # e.g. the container manager cannot be asked
            return f"cannot see the containers of {self.host}: {exc}"
        return ""

    def _start(self, rec: StepRecord) -> None:
        t = threading.Thread(
            target=self._run, args=(rec,), name=f"step-{rec.step.step_id}", daemon=True
        )
        self._threads[rec.step.step_id] = t
        t.start()

    def join(self, timeout: float) -> None:
        """Wait (bounded) for every running step: tests and shutdown."""
        deadline = time.monotonic() + timeout
        for t in list(self._threads.values()):
            t.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------ one step

    def _images(self, step: MigrationStep) -> Path:
        return self.outgoing / step.step_id.replace(":", "_")

    def _pre_images(self, step: MigrationStep) -> Path:
        """Where this step's pre-copy rounds are dumped (one directory per round)."""
        return self.outgoing / (step.step_id.replace(":", "_") + ".pre")

    def _note(self, rec: StepRecord, line: str, **changes: Any) -> StepRecord:
        log.info("step %s: %s", rec.step.step_id, line)
        events = [*rec.events, line]
        return self.store.update(rec, events=events, message="; ".join(events), **changes)

    def _run(self, rec: StepRecord) -> None:
        try:
            self._run_step(rec)
        except Exception as exc:
            # the rollback itself broke: say so rather than leave the step "running"
            log.exception("step %s: ending it", rec.step.step_id)
            last = self.store.get(rec.step.step_id) or rec
            if not last.terminal:
                why = f"INTERNAL ERROR while ending the step ({exc!r}); check where it runs"
                self.store.update(
                    last, state="failed", phase="finished", message=f"{last.message}; {why}"
                )

    def _run_step(self, rec: StepRecord) -> None:
        step = rec.step
        t0 = time.monotonic()
        deadline = t0 + step.deadline_s
        stopped = False  # the container no longer runs on the source
        frozen_t0 = 0.0

        def in_time(what: str) -> None:
            if time.monotonic() > deadline:
                raise StepFailedError(f"deadline of {step.deadline_s:g} s passed before {what}")

        try:
            rec = self.store.update(rec, state="running", phase="prepare")
            peer = self.peer(step)
            try:
                got = peer.prepare(step)
            except PeerForgedError as exc:
                raise StepFailedError(f"refused: {exc}") from exc
            except PeerError as exc:
                raise StepFailedError(f"target {step.target} refused: {exc}") from exc
            if got.get("host") != step.target:
                raise StepFailedError(
                    f"refused: the agent at {step.target_address} is host {got.get('host')!r}, "
                    f"not {step.target}"
                )
            in_time("the pre-copy")
            base: tuple[Path, str] | None = None
            if self.precopy_rounds:
                rec = self.store.update(rec, phase="precopy")
                rec, base = self._precopy(rec, peer, in_time)
            in_time("the checkpoint")
            images = self._images(step)
            shutil.rmtree(images, ignore_errors=True)
            images.mkdir(parents=True)
            rec = self.store.update(rec, phase="checkpoint", stopped_at=now())
            frozen_t0 = time.monotonic()
            try:
                self.backend.checkpoint(step.container, images)
            except BackendError as exc:
                stopped = step.container not in self.backend.running()
                raise StepFailedError(f"checkpoint on {self.host} failed: {exc}") from exc
            stopped = True
            rec = self._note(rec, f"checkpointed on {self.host}", phase="transfer")
            pause_point("after-checkpoint")
            in_time("the transfer")
            moved, retried = self._transfer(peer, step, images, base)
            sent = f"{moved} bytes sent to {step.target}"
            if base is not None and not retried:
                sent += f" (the blocks that changed since pre-copy round {rec.precopy_rounds})"
            if retried:
                sent += f" (restarted after {retried})"
            rec = self._note(rec, sent, phase="restore", bytes_moved=rec.bytes_moved + moved)
            in_time("the restore")
            # Written before the request: a restarted agent must know the fence too.
            rec = self.store.update(rec, fence_at=time.time() + self.lease_s)
            assert rec.fence_at is not None
            try:
                seen = peer.restore(step.step_id, rec.fence_at)
            except PeerError as exc:
                raise StepFailedError(str(exc)) from exc
            frozen = time.monotonic() - frozen_t0
            rec = self._note(
                rec,
                f"restored on {step.target} ({seen}); frozen {frozen:.2f} s",
                phase="committing",
                frozen_s=frozen,
            )
        except StepFailedError as exc:
            self._fail(rec, str(exc), stopped, t0)
            return
        except Exception as exc:  # a bug must still end the step with the container up
            log.exception("step %s", step.step_id)
            self._fail(rec, f"internal error: {exc!r}", stopped, t0)
            return
        self._commit(rec, t0)

    def _precopy(
        self, rec: StepRecord, peer: PeerClient, in_time: Callable[[str], None]
    ) -> tuple[StepRecord, tuple[Path, str] | None]:
        """Pre-copy rounds while the container runs (precopy.py); the last round shipped.

        A round that cannot be dumped or sent ends the pre-copy, not the step: the final
        dump is then sent whole (the target drops the rounds at ``finish``). A transfer
        that fails is retried by the final transfer from nothing.
        """
        step = rec.step
        root = self._pre_images(step)
        shutil.rmtree(root, ignore_errors=True)
        base: tuple[Path, str] | None = None
        previous = 0
        for k in range(1, self.precopy_rounds + 1):
            d = root / str(k)
            d.mkdir(parents=True)
            t = time.monotonic()
            try:
                self.backend.precheckpoint(step.container, d)
            except BackendError as exc:
                if step.container not in self.backend.running():
                    raise StepFailedError(f"pre-copy dump on {self.host}: {exc}") from exc
                rec = self._note(rec, f"pre-copy round {k} not dumped ({exc}); final dump whole")
                return rec, None
            paused = time.monotonic() - t
            try:
                sent = precopy.ship(
                    peer, step.step_id, d, f"{PRECOPY_DIR}/{k}", base=base, chunk=self.chunk_bytes
                )
            except PeerForgedError as exc:
                raise StepFailedError(f"pre-copy to {step.target}: {exc}") from exc
            except PeerError as exc:
                rec = self._note(rec, f"pre-copy round {k} not sent ({exc}); final dump whole")
                return rec, None
            rec = self._note(
                rec,
                f"pre-copy round {k}: dumped in {paused:.2f} s while running, {sent} bytes "
                f"sent to {step.target}",
                precopy_rounds=k,
                bytes_moved=rec.bytes_moved + sent,
            )
            if base is not None:
                shutil.rmtree(base[0], ignore_errors=True)
            base = (d, f"{PRECOPY_DIR}/{k}")
            if precopy.converged(k, sent, previous, self.chunk_bytes):
                break
            previous = sent
            in_time(f"pre-copy round {k + 1}")
        return rec, base

    def _transfer(
        self,
        peer: PeerClient,
        step: MigrationStep,
        images: Path,
        base: tuple[Path, str] | None = None,
    ) -> tuple[int, str]:
        """Send every image file; (bytes sent, what failed in earlier attempts).

        With ``base`` (the last pre-copy round, on both hosts) the first attempt sends
        only what changed since; a restarted one sends everything (``prepare`` emptied
        the target).
        """
        files = sorted(p for p in images.rglob("*") if p.is_file())
        manifest = [
            {"path": str(p.relative_to(images)), "size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in files
        ]
        last = ""
        failed: list[str] = []
        for attempt in range(1, self.transfer_attempts + 1):
            try:
                if attempt > 1:
                    peer.prepare(step)  # empties the target's directory: start clean
                    base = None
                sent = precopy.ship(
                    peer, step.step_id, images, "", base=base, chunk=self.chunk_bytes
                )
                peer.finish(step.step_id, manifest)
                return sent, "; ".join(failed)
            except PeerForgedError as exc:
                raise StepFailedError(f"transfer to {step.target}: {exc}") from exc
            except PeerError as exc:
                last = str(exc)
                failed.append(f"attempt {attempt}: {last}")
                log.warning("step %s: transfer attempt %d: %s", step.step_id, attempt, last)
                time.sleep(min(0.5 * attempt, 2.0))
        raise StepFailedError(
            f"transfer to {step.target} failed {self.transfer_attempts} times, last: {last}"
        )

    # ------------------------------------------------------------ endings

    def _fail(self, rec: StepRecord, why: str, stopped: bool, t0: float) -> None:
        rec = self._note(rec, why)
        if rec.phase == "prepare" and not stopped:
            rec, _ = self._abort_target(rec)
            self._end(rec, "failed", f"the container still runs on {self.host}", t0)
            return
        rec, state, line = self._undo(rec, stopped)
        self._end(rec, state, line, t0)

    def _abort_target(self, rec: StepRecord) -> tuple[StepRecord, bool]:
        """Ask the target to undo the step; (record, whether the target answered)."""
        line, heard = self._ask_abort(rec.step)
        return self._note(rec, line), heard

    def _ask_abort(self, step: MigrationStep) -> tuple[str, bool]:
        """One abort asked of the target: (what happened, whether the target answered)."""
        try:
            return f"target: {self.peer(step).abort(step.step_id)}", True
        except PeerRefusedError as exc:
            return f"target refused the abort: {exc}", True
        except PeerError as exc:
            return f"target abort failed: {exc}", False

    def _outwait_fence(self, rec: StepRecord) -> StepRecord:
        """The target was asked to restore and cannot be reached: its copy may run. Ask
        it again to abort until its fence time has surely passed (then it has killed any
        copy it restored, since no commit came); the record once it is safe to restore
        here."""
        assert rec.fence_at is not None
        until = rec.fence_at + self.fence_margin_s
        rec = self._note(
            rec, f"waiting for the target's fence ({max(0.0, until - time.time()):.0f} s at most)"
        )
        while time.time() < until:
            time.sleep(min(1.0, max(0.0, until - time.time())))
            line, heard = self._ask_abort(rec.step)
            if heard:
                return self._note(rec, line)
        return self._note(rec, "target unreachable past its fence time: its copy is killed")

    def _undo(self, rec: StepRecord, stopped: bool) -> tuple[StepRecord, Any, str]:
        """Make the container run on the source again; (record, state, last line)."""
        step = rec.step
        rec, heard = self._abort_target(rec)
        if not heard and rec.fence_at is not None and stopped:
            rec = self._outwait_fence(rec)
        if step.container in self.backend.running():
            if not stopped:
                return rec, "failed", f"the container still runs on {self.host}"
            return rec, "rolled_back", f"the container runs on {self.host}"
        images = self._images(step)
        if not images.is_dir() or not any(images.iterdir()):
            why = f"ROLLBACK IMPOSSIBLE: no images in {images}; the container is not running"
            return rec, "failed", why
        try:
            self.backend.restore(step.container, images)
            try:
                seen = self.backend.verify(step.container)
            except NotVerifiedError as exc:  # it runs here: there is nowhere better
                self.backend.resume(step.container)
                seen = f"RUNNING, but {exc}"
        except BackendError as exc:
            # keep what was restored running rather than stopped for the admin
            with contextlib.suppress(BackendError):
                self.backend.resume(step.container)
            why = f"ROLLBACK FAILED: restore on {self.host}: {exc}; images kept in {images}"
            return rec, "failed", why
        shutil.rmtree(images, ignore_errors=True)
        if rec.stopped_at is not None:
            frozen = (now() - rec.stopped_at).total_seconds()
            rec = self.store.update(rec, frozen_s=frozen)
            seen += f"; frozen {frozen:.2f} s"
        try:
            said = run_hook(self.network_hook, step.container, self.host)
            if said:
                seen += f"; network hook: {said}"
        except BackendError as exc:
            seen += f"; {exc}"
        return rec, "rolled_back", f"rolled back: restored on {self.host} ({seen})"

    def _end(self, rec: StepRecord, state: Any, line: str, t0: float) -> None:
        shutil.rmtree(self._pre_images(rec.step), ignore_errors=True)
        rec = self._note(rec, line)
        self.store.update(
            rec, state=state, phase="finished", seconds=round(time.monotonic() - t0, 3)
        )

    def _commit(self, rec: StepRecord, t0: float) -> None:
        """The target first: its copy lives on only if it hears the commit before its
        fence time. The source's state goes only once the target has said so."""
        step = rec.step
        rec, said = self._commit_target(rec)
        if said is None:  # never heard: the container runs on the target or nowhere
            why = (
                f"IN DOUBT: {step.target} never answered the commit, so whether "
                f"{step.container} runs there or was fenced is unknown; not restored here "
                f"(it could run twice), images kept in {self._images(step)}"
            )
            self._end(rec, "failed", why, t0)
            return
        if said != "committed":  # the target's copy does not run: run it here again
            rec = self._note(rec, f"target: {said}")
            rec, state, line = self._undo(rec, stopped=True)
            self._end(rec, state, line, t0)
            return
        try:
            self.backend.commit(step.container, self._images(step))
            shutil.rmtree(self._images(step), ignore_errors=True)
        except BackendError as exc:
            rec = self._note(rec, f"source clean-up: {exc}")
        self._end(rec, "done", f"committed: {step.container} runs on {step.target}", t0)

    def _commit_target(self, rec: StepRecord) -> tuple[StepRecord, str | None]:
        """Tell the target to commit, again while it cannot be reached (a commit asked
        twice is answered the same), until its fence time and doubt_s after; (record,
        "committed" or the target's refusal, or None when it never answered)."""
        fence = rec.fence_at if rec.fence_at is not None else time.time()
        until = fence + self.fence_margin_s + self.doubt_s
        last = ""
        for attempt in range(1, 1_000_000):
            try:
                self.peer(rec.step).commit(rec.step.step_id)
                return rec, "committed"
            except PeerRefusedError as exc:
                return rec, f"refused the commit: {exc}"
            except PeerError as exc:
                if time.time() >= until:
                    break
                if not last:
                    rec = self._note(rec, f"target commit failed: {exc}; asking again")
                last = str(exc)
                time.sleep(min(0.25 * attempt, 2.0))
        return self._note(rec, f"target commit failed until now: {last}"), None

    # ------------------------------------------------------------ agent restart

    def recover(self) -> None:
        """Finish or undo the steps a previous run of this agent left unfinished."""
        for rec in self.store.all():
            if rec.terminal:
                continue
            t0 = time.monotonic()
            if rec.phase == "queued":
                self._start(rec)  # nothing happened yet: run it now
                continue
            again = self._note(rec, f"agent restarted during phase {rec.phase}")
            if again.phase == "committing":
                self._commit(again, t0)
            elif again.phase in ("prepare", "precopy"):  # it never stopped
                self._fail(again, "not started", False, t0)
            else:
                self._fail(again, "undone", True, t0)
