"""`fedcd federation` and `fedcd models` per Q-matrix: what they refuse before anything starts, and what they print.

The whole federation with real processes is tests/federated/test_federation.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from app.cli import cli
from federated import CDModel, ModelRegistry
from qmatrix import example_qmatrix, save_qmatrix

runner = CliRunner()


def test_certs_and_keygen_write_the_files_they_name(tmp_path: Path) -> None:
    made = runner.invoke(cli, ["federation", "certs", "--out", str(tmp_path / "c"), "--nodes", "north,south"])
    assert made.exit_code == 0, made.output
    assert {p.name for p in (tmp_path / "c" / "nodes").iterdir()} == {"north.key", "north.pub", "south.key", "south.pub"}
    assert runner.invoke(cli, ["federation", "certs", "--out", str(tmp_path / "c")]).exit_code == 2  # never a 2nd CA
    key = runner.invoke(cli, ["federation", "keygen", str(tmp_path / "mine.key")])
    assert key.exit_code == 0 and (tmp_path / "mine.pub").is_file()
    assert runner.invoke(cli, ["federation", "keygen", str(tmp_path / "mine.key")]).exit_code == 2


def test_coordinator_refuses_inconsistent_options_before_starting(tmp_path: Path) -> None:
    # Prepare
    runner.invoke(cli, ["federation", "certs", "--out", str(tmp_path / "c"), "--nodes", "a"])
    q = tmp_path / "q.json"
    save_qmatrix(example_qmatrix(), q)
    (tmp_path / "held.csv").write_text("student_id,item_id,correct\ns1,q01,1\ns1,nope,0\n")
    base = ["federation", "coordinator", "--qmatrix", str(q), "--heldout", str(tmp_path / "held.csv"),
            "--node-key", str(tmp_path / "c" / "nodes" / "a.pub"), "--epsilon", "8"]
    cases = [
        ([], "--certs DIR"),
        (["--certs", str(tmp_path / "c"), "--dp", "client"], "--dp must be student"),
        (["--certs", str(tmp_path / "c"), "--min-nodes", "2"], "exceeds the 1 registered"),
        (["--certs", str(tmp_path / "c")], "--heldout names items not in the Q-matrix: nope"),
        (["--certs", str(tmp_path / "missing")], "TLS files not found"),
    ]

    # Execute / Assert
    for extra, message in cases:
        result = runner.invoke(cli, [*base, *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.output, (extra, result.output)


def test_node_checks_its_data_before_connecting(tmp_path: Path) -> None:
    runner.invoke(cli, ["federation", "certs", "--out", str(tmp_path / "c"), "--nodes", "a"])
    save_qmatrix(example_qmatrix(), tmp_path / "q.json")
    (tmp_path / "data.csv").write_text("student_id,item_id,correct\ns1,q01,1\ns1,zz9,0\n")
    result = runner.invoke(cli, ["federation", "node", "--superlink", "127.0.0.1:9", "--root-cert",
                                 str(tmp_path / "c" / "ca.pem"), "--auth-key", str(tmp_path / "c" / "nodes" / "a.key"),
                                 "--data", str(tmp_path / "data.csv"), "--qmatrix", str(tmp_path / "q.json")])
    assert result.exit_code == 2 and "items not in the Q-matrix" in result.output and "zz9" in result.output


def test_models_are_listed_and_rolled_back_per_qmatrix(tmp_path: Path) -> None:
    # Prepare: two versions for each of two Q-matrices
    registry = ModelRegistry(tmp_path)
    for seed, qmatrix_id in enumerate(("alpha", "beta", "alpha", "beta")):
        registry.publish(CDModel(("a", "b"), generator=torch.Generator().manual_seed(seed)),
                         manifest={"qmatrix_id": qmatrix_id, "rounds": 1})

    # Execute
    listing = runner.invoke(cli, ["models", "list", "--registry", str(tmp_path), "--qmatrix", "beta"])
    ambiguous = runner.invoke(cli, ["models", "rollback", "--registry", str(tmp_path)])
    rolled = runner.invoke(cli, ["models", "rollback", "--qmatrix", "alpha", "--registry", str(tmp_path)])

    # Assert
    assert listing.exit_code == 0 and "v0002" in listing.output and "v0001" not in listing.output
    assert ambiguous.exit_code == 1 and "several Q-matrices" in ambiguous.output
    assert rolled.exit_code == 0 and "active version for Q-matrix alpha: v0001" in rolled.output
    assert registry.active_versions() == {"alpha": "v0001", "beta": "v0004"}


def test_split_gives_each_institution_its_own_folder(tmp_path: Path) -> None:
    from qmatrix import load_qmatrix, read_responses_csv

    result = runner.invoke(cli, ["federation", "split", "--out", str(tmp_path), "--dataset", "synthetic",
                                 "--nodes", "2", "--heldout", "0.25"])
    assert result.exit_code == 0, result.output
    held = read_responses_csv(tmp_path / "coordinator" / "heldout.csv")
    nodes = [read_responses_csv(tmp_path / f"node-{i}" / "responses.csv") for i in (1, 2)]
    ids = [s.student_id for s in held] + [s.student_id for n in nodes for s in n]
    assert len(held) == 75 and [len(n) for n in nodes] == [113, 112] and len(set(ids)) == 300
    assert all(s.student_id.startswith("node-2-") for s in nodes[1])
    assert load_qmatrix(tmp_path / "node-1" / "qmatrix.json") == load_qmatrix(tmp_path / "coordinator" / "qmatrix.json")


def test_coordinator_takes_a_qmatrix_the_gateway_stores_by_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli.federation import _qmatrix

    monkeypatch.setenv("FEDCD_STATE_DIR", str(tmp_path))
    assert _qmatrix("example-prealgebra", None, None) == example_qmatrix()
    assert _qmatrix("example-prealgebra", "renamed", None).id == "renamed"
    with pytest.raises(ValueError, match="neither a file nor a Q-matrix the gateway stores for tenant 'north'"):
        _qmatrix("frcsub", None, "north")
