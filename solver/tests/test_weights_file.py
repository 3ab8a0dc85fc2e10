"""A weights file must give F usable weights: none negative or NaN, not all zero."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from clavis.cli import main
from clavis.model import WeightsFile

PP = Path(__file__).resolve().parents[2] / "examples" / "parapluie"


def _doc(**weights: float) -> dict[str, Any]:
    return {
        "weights": {"P": 0.25, "D": 0.25, "C": 0.25, "M": 0.25, **weights},
        "method": "inverse", "recommended": "inverse", "reason": "test",
        "picks": [0, 1, 2], "front_sha256": "0" * 64, "outcomes": [],
    }  # fmt: skip


def test_valid_weights_pass_and_zero_is_allowed_for_some() -> None:
    assert WeightsFile.model_validate(_doc()).weights.P == 0.25
    assert WeightsFile.model_validate(_doc(M=0.0)).weights.M == 0.0


@pytest.mark.parametrize(
    ("weights", "needle"),
    [
        ({"D": -0.5}, "must not be negative: D=-0.5"),
        ({"P": -1.0, "C": -2.0}, "must not be negative: P=-1, C=-2"),
        ({"P": 0.0, "D": 0.0, "C": 0.0, "M": 0.0}, "weights are all zero"),
        ({"C": math.nan}, "finite number"),
        ({"P": math.inf}, "finite number"),
    ],
)
def test_unusable_weights_are_refused(weights: dict[str, float], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        WeightsFile.model_validate(_doc(**weights))


def test_solve_refuses_a_weights_file_with_negative_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "w.json"
    bad.write_text(json.dumps({"kind": "clavis.weights", **_doc(P=-0.1)}))
    out = tmp_path / "placement.json"
    code = main(["solve", "--cluster", str(PP / "cluster.yaml"), "--workload",
                 str(PP / "workload.yaml"), "--weights-file", str(bad), "--out", str(out),
                 "--time-limit", "1", "--quiet"])  # fmt: skip
    assert code == 2
    assert "must not be negative: P=-0.1" in capsys.readouterr().err
    assert not out.exists()
