"""The Flower engines choose the model kind and keep the best round, as the in-process trainer does (issue 31, part 3):
``model_kind="auto"`` trains every candidate kind on the same institutions and keeps the best held-out one; each
run keeps its weights after its best held-out round; under DP the candidates' rounds compose in one accountant."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from federated import FedConfig, LocalConfig, ModelRegistry, epsilon_for
from federated.flower import FlowerConfig, FlowerTraining, read_history, run_inprocess, train_flower
from federated.models import CANDIDATE_KINDS
from federated.publish import publish_trained
from tests.federated.conftest import Prepared
from tests.federated.flower_apps.runs import write


def _same(a: dict, b: dict) -> bool:
    """Two state dicts hold equal tensors (non-tensor entries, such as the seen-item set, compared as values)."""
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def test_the_best_round_is_served_not_the_last(sim: Prepared, tmp_path: Path) -> None:
    # Prepare: a learning rate so high that the held-out AUC falls after the first round (seeded: it does here)
    fed = FedConfig(rounds=6, local=LocalConfig(epochs=3, lr=2.0))
    best = run_inprocess(write(tmp_path / "best", sim, FlowerConfig(fed=fed)), tmp_path / "best" / "out")
    last = run_inprocess(write(tmp_path / "last", sim, FlowerConfig(fed=fed, keep="last")), tmp_path / "last" / "out")

    # Assert: both ran the same rounds; best serves the argmax round, last the final one, and history.json says so
    aucs = [r.auc for r in best.history]
    assert aucs == pytest.approx([r.auc for r in last.history])
    assert best.served_round == int(np.argmax(aucs)) + 1 and last.served_round == 6
    assert read_history(tmp_path / "best" / "out")["served_round"] == best.served_round
    assert _same(torch.load(tmp_path / "best" / "out" / "model.pt", weights_only=True), best.model.state_dict())
    assert best.served_round < 6  # so the served weights are the best round's, not the last round's
    assert not _same(best.model.state_dict(), last.model.state_dict())


def test_auto_trains_every_candidate_kind_and_keeps_the_best_held_out_one(sim: Prepared, tmp_path: Path) -> None:
    result = train_flower(dataset=sim.dataset, plan=FlowerTraining(clients=3, rounds=2, seed=4), out_dir=tmp_path)

    selection = result.selection
    assert selection is not None and [c["kind"] for c in selection["candidates"]] == list(CANDIDATE_KINDS)
    scores = {c["kind"]: c["heldout_auc"] for c in selection["candidates"]}
    assert selection["chosen"] == max(scores, key=scores.get) and result.model.config()["kind"] == selection["chosen"]
    for kind in CANDIDATE_KINDS:  # each candidate's own run folder
        assert (tmp_path / "candidates" / kind / "history.json").exists()
    # the chosen run's files are the run's: its history and served weights
    assert read_history(tmp_path)["served_round"] == selection["served_round"] == result.served_round
    assert _same(torch.load(tmp_path / "model.pt", weights_only=True), result.model.state_dict())

    # the published manifest records the choice, as the in-process trainer's does
    published = publish_trained(result, dataset=sim.dataset, registry=tmp_path / "registry",
                                options={"clients": 3, "rounds": 2, "seed": 4, "dp": "none"}, force=True)
    manifest = ModelRegistry(tmp_path / "registry").load(published.version).manifest
    assert manifest["model_selection"]["chosen"] == selection["chosen"]
    assert len(manifest["model_selection"]["candidates"]) == len(CANDIDATE_KINDS)


def test_under_dp_every_candidates_rounds_compose_within_the_budget(sim: Prepared, tmp_path: Path) -> None:
    base = FlowerConfig(fed=FedConfig(client_sample_rate=0.5, clip_norm=0.1))
    plan = FlowerTraining(clients=4, rounds=2, dp="client", epsilon=2.0, seed=1)
    result = train_flower(dataset=sim.dataset, plan=plan, out_dir=tmp_path, config=base)

    assert result.accountant is not None and len(result.accountant) == 2 * len(CANDIDATE_KINDS)
    composed = result.accountant.get_epsilon(1e-5)
    assert 1.8 < composed <= 2.0  # the noise was calibrated for every candidate's rounds together
    assert result.selection is not None and result.selection["epsilon_composed"] == pytest.approx(composed)
    # one candidate alone spent about half: publishing its own history's epsilon would understate the cost
    assert (result.history[-1].epsilon or 0.0) < 0.8 * composed
    sigma, q, _ = result.accountant.history[0]
    assert composed == pytest.approx(epsilon_for([(sigma, q, 2 * len(CANDIDATE_KINDS))], delta=1e-5), rel=1e-6)
    published = publish_trained(result, dataset=sim.dataset, registry=tmp_path / "registry",
                                options={"clients": 4, "rounds": 2, "seed": 1, "dp": "client", "epsilon": 2.0},
                                force=True)
    manifest = ModelRegistry(tmp_path / "registry").load(published.version).manifest
    assert manifest["epsilon"] == pytest.approx(composed)


def test_an_unknown_kind_or_keep_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown model kind"):
        FlowerTraining(clients=2, rounds=1, model_kind="nope")
    with pytest.raises(ValueError, match="keep"):
        FlowerConfig(keep="first")  # type: ignore[arg-type]


def test_a_federation_of_institutions_trains_one_named_kind(sim: Prepared, tmp_path: Path) -> None:
    from federated.flower import CoordinatorLink, LinkTLS, StartingModel, coordinate
    from federated.local import StudentDP

    student = StudentDP(noise_multiplier=1.0, clip_norm=1.0, sample_rate=0.2, steps=1)
    config = FlowerConfig(fed=FedConfig(rounds=1, dp="student", student_dp=student))
    link = CoordinatorLink(tls=LinkTLS(ca_cert=tmp_path / "ca.pem", cert=tmp_path / "c.pem", key=tmp_path / "k"),
                           node_keys=[tmp_path / "node.pub"])
    with pytest.raises(ValueError, match="one model kind"):
        coordinate(qmatrix=sim.dataset.qmatrix, heldout=sim.dataset.students[:5], link=link, config=config,
                   work_dir=tmp_path / "work", start=StartingModel(kind="auto"))
    assert not (tmp_path / "work").exists()  # refused before anything was written or started
