"""evaluation.targets reads issue 31's targets off held-out runs' results.json."""

from __future__ import annotations

import json
from pathlib import Path

from evaluation.targets import target_row


def _run(folder: Path, served: float, rows: dict[str, float]) -> Path:
    folder.mkdir()
    listed = [{"name": "served", "epsilon": None, "auc": served}, {"name": "served", "epsilon": 32.0, "auc": 0.1}]
    listed += [{"name": n, "epsilon": None, "auc": a} for n, a in rows.items()]
    (folder / "results.json").write_text(json.dumps({"dataset": "d", "seed": 1, "rows": listed}))
    return folder


def test_the_row_compares_served_with_the_best_cdm_the_best_member_and_the_untrained_run(tmp_path: Path) -> None:
    rows = {"irt": 0.80, "dina": 0.78, "ncdm": 0.81, "single:local-fed": 0.83, "single:local-fed (link)": 0.9,
            "single:sim:a": 0.7}
    trained = _run(tmp_path / "t", 0.82, rows)
    untrained = _run(tmp_path / "u", 0.79, rows)
    row = target_row(trained, untrained)
    assert row == ("| d | 1 | 0.820 | `ncdm` 0.810 | +0.010 | `single:local-fed` 0.830 | -0.010 | +0.030 |")
