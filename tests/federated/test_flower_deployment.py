"""The deployment engine: flower-superlink + 2 flower-supernode processes on 127.0.0.1 train 3 rounds.

Slow (about a minute: every message starts a ClientApp process, idle nodes poll every 3 s),
so this is the only deployment run; everything else uses the in-process engine.
"""

from __future__ import annotations

import json
from pathlib import Path

from federated.flower import FlowerDeployment, FlowerRoundRecord, FlowerTraining, read_history, train_flower
from tests.federated.conftest import Prepared


def _processes_with_home(home: Path) -> list[int]:
    """Live processes whose environment names this FLWR_HOME (every Flower process the run started)."""
    needle = f"FLWR_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_superlink_and_supernodes_train_three_rounds_and_leave_no_process(sim: Prepared, tmp_path: Path) -> None:
    # Prepare
    out, home = tmp_path / "run", tmp_path / "flwr-home"
    seen: list[FlowerRoundRecord] = []

    # Execute
    result = train_flower(dataset=sim.dataset, plan=FlowerTraining(clients=2, rounds=3, seed=1, model_kind="higher-order-irt"), out_dir=out,
                          deployment=FlowerDeployment(flower_home=home, timeout_s=480), progress=seen.append)

    # Assert: the ServerApp's marker, flwr ls, the progress callback, and no survivors
    marker = read_history(out)
    assert marker["status"] == "completed" and [r.round for r in marker["rounds"]] == [1, 2, 3]
    assert all(r.sampled_clients == (0, 1) and r.failures == 0 for r in marker["rounds"])
    assert json.loads((out / "run-status.json").read_text())["status"] == "finished:completed"
    assert [r.round for r in seen] == [1, 2, 3] and result.history == marker["rounds"]
    assert result.history[-1].auc > 0.75
    assert (out / "model.pt").exists() and (out / "logs" / "superlink.log").exists()
    assert _processes_with_home(home) == []
