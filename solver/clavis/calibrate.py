"""Weights from the admin's picked schedules (thesis §5.5.1) — pure functions.

Two methods over normalised objective vectors (rows: schedules; columns: P, D, C[, M]):

- ``thesis``: Eq. 5.1 solved for the picks, α·P_n + β·D_n + γ·C_n = F with F = 1 for
  every pick (the thesis's −β·D_n is our +β·D_n since our D is the contention to
  minimise). Exactly three picks give a square system (Matlab ``mldivide``); more give
  least squares. Weights are scaled to sum 1.
- ``inverse``: inverse optimisation. A linear program finds w >= 0, sum w = 1, under which
  every pick is optimal among all schedules of the front, or failing that least
  sub-optimal: minimise sum_k s_k subject to w·f_k <= w·f_j + s_k for every pick k and
  every schedule j. The optimum (the residual) is 0 exactly when such weights exist.

Each outcome also reports its *regret*: the mean over picks of how much worse the pick
is than the front's best schedule under those weights. The recommendation is the method
with the lower regret; the thesis method on a tie, as the published procedure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog

from clavis.model import CalibrationOutcome, Front, ObjectiveValues, WeightsFile

Matrix = npt.NDArray[np.float64]
METHODS = ("thesis", "inverse")
MIN_PICKS = 3


class CalibrationError(ValueError):
    """The picks cannot give weights; the message says why."""


@dataclass(frozen=True)
class Outcome:
    method: str
    weights: tuple[float, ...]  # one per objective column, summing to 1
    residual: float  # thesis: least-squares residual norm; inverse: LP optimum
    regret: float


def check_picks(picks: Matrix) -> None:
    if len(picks) < MIN_PICKS:
        raise CalibrationError(f"pick at least {MIN_PICKS} schedules, got {len(picks)}")
    if not np.all(np.isfinite(picks)):
        raise CalibrationError("a picked schedule has a non-finite objective value")
    for i in range(len(picks)):
        for j in range(i):
            if np.allclose(picks[i], picks[j], rtol=0, atol=1e-12):
                raise CalibrationError(
                    f"picks {j + 1} and {i + 1} have identical objective values; "
                    "pick schedules that differ"
                )


def regret(weights: Matrix, picks: Matrix, front: Matrix) -> float:
    best = float(np.min(front @ weights))
    return float(np.mean(picks @ weights - best))


def thesis(picks: Matrix, front: Matrix) -> Outcome:
    """Eq. 5.1 for the picks, least squares beyond three; refuses degenerate systems."""
    check_picks(picks)
    rank = int(np.linalg.matrix_rank(picks, tol=1e-9))
    if rank < picks.shape[1]:
        raise CalibrationError(
            f"the picks span only {rank} of {picks.shape[1]} objective dimensions "
            "(rank-deficient system); pick schedules that trade the objectives off differently"
        )
    w, residuals, _, _ = np.linalg.lstsq(picks, np.ones(len(picks)), rcond=None)
    if not np.all(np.isfinite(w)):
        raise CalibrationError("the thesis system gave non-finite weights")
    if np.any(w < -1e-12):
        shown = ", ".join(f"{x:.4g}" for x in w)
        raise CalibrationError(
            f"the thesis system gives negative weights ({shown}): no positive weighting "
            "puts these picks on one level of F; use --method inverse or other picks"
        )
    w = np.clip(w, 0.0, None)
    if w.sum() <= 0:
        raise CalibrationError("the thesis system gives all-zero weights")
    w = w / w.sum()
    res = float(np.sqrt(residuals[0])) if len(residuals) else 0.0
    return Outcome("thesis", tuple(float(x) for x in w), res, regret(w, picks, front))


def inverse(picks: Matrix, front: Matrix) -> Outcome:
    """Weights under which the picks are optimal (or least sub-optimal) in the front."""
    check_picks(picks)
    k, d = picks.shape
    n = len(front)
    # Variables: w (d), s (k). Rows: for pick p and schedule j, w·(f_p - f_j) - s_p <= 0.
    rows = np.zeros((k * n, d + k))
    for p in range(k):
        rows[p * n : (p + 1) * n, :d] = picks[p] - front
        rows[p * n : (p + 1) * n, d + p] = -1.0
    cost = np.concatenate([np.zeros(d), np.ones(k)])
    eq = np.concatenate([np.ones(d), np.zeros(k)])[None, :]
    res = linprog(
        cost,
        A_ub=rows,
        b_ub=np.zeros(k * n),
        A_eq=eq,
        b_eq=[1.0],
        bounds=[(0, None)] * (d + k),
        method="highs",
    )
    if res.status != 0:
        raise CalibrationError(f"the inverse-optimisation LP failed: {res.message}")
    w = np.clip(res.x[:d], 0.0, None)
    w = w / w.sum()
    return Outcome("inverse", tuple(float(x) for x in w), float(res.fun), regret(w, picks, front))


def calibrate(picks: Matrix, front: Matrix) -> tuple[dict[str, Outcome | str], str, str]:
    """Run both methods. Returns outcomes (or the error text), the recommendation, a reason."""
    check_picks(picks)  # problems common to both methods are reported once
    results: dict[str, Outcome | str] = {}
    for name, fn in (("thesis", thesis), ("inverse", inverse)):
        try:
            results[name] = fn(picks, front)
        except CalibrationError as exc:
            results[name] = str(exc)
    good = {k: v for k, v in results.items() if isinstance(v, Outcome)}
    if not good:
        raise CalibrationError("; ".join(f"{k}: {v}" for k, v in results.items()))
    if len(good) == 1:
        (only,) = good
        other = "inverse" if only == "thesis" else "thesis"
        return results, only, f"{only}: the {other} method failed ({results[other]})"
    t, i = good["thesis"], good["inverse"]
    if i.regret < t.regret - 1e-9:
        reason = (
            f"inverse: the picks are closer to optimal under its weights "
            f"(mean regret {i.regret:.4g} vs {t.regret:.4g} for the thesis method)"
        )
        return results, "inverse", reason
    reason = (
        f"thesis: its weights make the picks at least as good as the inverse method's "
        f"(mean regret {t.regret:.4g} vs {i.regret:.4g}); it is the published procedure"
    )
    return results, "thesis", reason


# --- a front's picks: the one rule `clavis calibrate` and clavisd apply ----------------

Method = Literal["thesis", "inverse"]


def outcome_doc(name: str, o: Outcome | str, objectives: Sequence[str]) -> CalibrationOutcome:
    """One method's answer as the weights file records it (an error text, or weights for
    every objective of P, D, C, M: 0 for those the front was not searched on)."""
    if isinstance(o, str):
        return CalibrationOutcome(method=name, error=o)
    full = dict.fromkeys("PDCM", 0.0) | dict(zip(objectives, o.weights, strict=True))
    return CalibrationOutcome(method=name, weights=ObjectiveValues(**full), residual=o.residual,
                              regret=o.regret)  # fmt: skip


@dataclass(frozen=True)
class PickedWeights:
    """Both methods' answers for picks of a front, and which one is recommended."""

    picks: tuple[int, ...]
    outcomes: tuple[CalibrationOutcome, ...]  # thesis, then inverse
    recommended: Method
    reason: str

    def refusal(self, method: Method | None) -> str | None:
        """Why no weights are taken with ``method``, or None. Without a method (the
        recommended one), any failed method refuses: a degenerate or negative system is
        the admin's to see, and the other method's weights are taken only by name."""
        named = [o for o in self.outcomes if method is None or o.method == method]
        failed = next((o for o in named if o.error is not None), None)
        return None if failed is None else f"the {failed.method} method failed: {failed.error}"

    def weights_file(self, method: Method | None, front_sha256: str) -> WeightsFile:
        """The weights file `clavis calibrate` writes and POST /fronts/{id}/picks stores;
        CalibrationError with the refusal when there is one."""
        why = self.refusal(method)
        if why is not None:
            raise CalibrationError(why)
        use = method or self.recommended
        chosen = next(o for o in self.outcomes if o.method == use)
        assert chosen.weights is not None  # no refusal: the method answered
        return WeightsFile(weights=chosen.weights, method=use, recommended=self.recommended,
                           reason=self.reason, picks=list(self.picks),
                           front_sha256=front_sha256, outcomes=list(self.outcomes))  # fmt: skip


def calibrate_picks(front: Front, picks: Sequence[int]) -> PickedWeights:
    """Both methods for schedules ``picks`` (ids) of ``front``, on its normalised values;
    CalibrationError for an unknown or repeated id, or when no method gives weights."""
    by_id = {p.id: p for p in front.points}
    unknown = [p for p in picks if p not in by_id]
    if unknown:
        raise CalibrationError(f"no schedule with id {unknown[0]} in the front "
                               f"(ids run 0..{max(by_id, default=0)})")  # fmt: skip
    if len(set(picks)) != len(picks):
        raise CalibrationError("a schedule is picked twice")
    names = list(front.search.objectives)
    matrix = np.array([[getattr(p.normalised, n) for n in names] for p in front.points])
    chosen = np.array([[getattr(by_id[k].normalised, n) for n in names] for k in picks])
    results, recommended, reason = calibrate(chosen, matrix)
    outcomes = tuple(outcome_doc(m, results[m], names) for m in METHODS)
    best: Method = "inverse" if recommended == "inverse" else "thesis"
    return PickedWeights(tuple(picks), outcomes, best, reason)
