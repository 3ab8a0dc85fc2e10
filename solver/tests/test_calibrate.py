"""Weight calibration maths: round trip from known weights, and every refusal."""

from __future__ import annotations

import numpy as np
import pytest

from clavis.calibrate import CalibrationError, calibrate, inverse, thesis


def tied_front(w: np.ndarray, rng: np.random.Generator, ties: int = 3) -> np.ndarray:
    """Normalised objective vectors in [0,1]^3: ``ties`` schedules share the minimum of
    w·f (they are what an admin with weights w would pick), the rest are worse."""
    level = 0.35
    rows = []
    while len(rows) < ties:
        a, b = rng.uniform(0, 1, size=2)
        c = (level - w[0] * a - w[1] * b) / w[2]
        if 0 <= c <= 1:
            rows.append([a, b, c])
    while len(rows) < ties + 40:
        f = rng.uniform(0, 1, size=3)
        if w @ f > level + 0.02:
            rows.append(list(f))
    return np.array(rows)


@pytest.mark.parametrize("seed", range(8))
def test_round_trip_recovers_weights_with_the_same_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    w_true = rng.integers(1, 11, size=3).astype(float)
    w_true /= w_true.sum()
    front = tied_front(w_true, rng)
    picks = front[:3]
    best_true = set(np.flatnonzero(np.isclose(front @ w_true, np.min(front @ w_true))))
    for method in (thesis, inverse):
        out = method(picks, front)
        w = np.array(out.weights)
        assert w.sum() == pytest.approx(1.0) and np.all(w >= 0)
        scores = front @ w
        best = set(np.flatnonzero(np.isclose(scores, scores.min(), atol=1e-9)))
        assert best == best_true, method.__name__
        assert out.regret == pytest.approx(0.0, abs=1e-9)
    # The thesis system is square here: it returns the weights themselves.
    assert np.allclose(thesis(picks, front).weights, w_true)


def test_least_squares_with_more_than_three_picks() -> None:
    rng = np.random.default_rng(11)
    w_true = np.array([0.2, 0.5, 0.3])
    front = tied_front(w_true, rng, ties=5)
    out = thesis(front[:5], front)
    assert np.allclose(out.weights, w_true) and out.residual == pytest.approx(0, abs=1e-9)


def test_recommendation_prefers_lower_regret() -> None:
    rng = np.random.default_rng(4)
    front = rng.uniform(0, 1, size=(30, 3))
    picks = front[[0, 5, 9]]
    results, chosen, reason = calibrate(picks, front)
    assert chosen in {"thesis", "inverse"} and chosen in reason
    ok = {k: v for k, v in results.items() if not isinstance(v, str)}
    if len(ok) == 2:
        assert ok[chosen].regret <= min(o.regret for o in ok.values()) + 1e-9


def test_refusals() -> None:
    front = np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1], [0.2, 0.2, 0.2], [0.9, 0.9, 0.9]])
    with pytest.raises(CalibrationError, match="at least 3"):
        calibrate(front[:2], front)
    with pytest.raises(CalibrationError, match="identical objective values"):
        calibrate(front[[0, 1, 1]], front)
    # Three collinear picks: rank 2 of 3.
    with pytest.raises(CalibrationError, match="rank-deficient"):
        thesis(front[:3], front)
    with pytest.raises(CalibrationError, match="non-finite"):
        calibrate(np.array([[0.1, 0.2, np.nan], [0.3, 0.2, 0.1], [0.2, 0.9, 0.2]]), front)
    # Picks that no positive weighting puts on one level of F.
    skew = np.array([[0.1, 0.1, 0.1], [0.9, 0.1, 0.1], [0.1, 0.9, 0.95]])
    with pytest.raises(CalibrationError, match="negative weights"):
        thesis(skew, np.vstack([skew, front]))
    # The inverse method still answers, with a residual that says how far from optimal.
    out = inverse(skew, np.vstack([skew, front]))
    assert out.residual > 0
