"""The DP item release on Flower (federated.flower.release, issue 32): each client releases its noisy per-item sums
once, the server warm-starts the bank from them, the rounds leave item_delta alone, and the signed manifest alone
lets dp_accounting recompute the guarantee per student, as for the in-process trainer."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict

from federated.data import encode_dataset, encode_students
from federated.flower import (
    CDClient,
    FlowerConfig,
    FlowerTraining,
    ItemReleaseMod,
    LocalGrid,
    ReleaseInputs,
    load_partition,
    load_settings,
    make_node_client_app,
    plan_config,
    run_config,
    run_grid,
    train_flower,
    write_server_run,
)
from federated.flower.engine import _task_identity
from federated.flower.release import MESSAGE_TYPE, RELEASE_FILE, load_release
from federated.flower.train import _composed
from federated.inprocess import FedResult, RoundRecord
from federated.item_release import charged, release_events, release_noise
from federated.models import new_model
from federated.publish import publish_federated, publish_trained
from federated.registry import ModelRegistry
from qmatrix import Dataset, example_qmatrix, qmatrix_fingerprint, save_qmatrix, simulate_dina

EPSILON, DELTA = 3.0, 1e-5


@pytest.fixture(scope="module")
def small() -> Dataset:
    """SIMULATED: 300 DINA students on the example Q-matrix."""
    return simulate_dina(example_qmatrix(), n_students=300, slip=0.05, guess=0.1, seed=11)


def _recomputed(accounting: dict) -> float:
    """ε from the manifest's events with dp_accounting alone."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(
        value_discretization_interval=accounting["value_discretization_interval"])
    accountant.compose(dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
            e["sample_rate"], dp_accounting.GaussianDpEvent(e["noise_multiplier"])), e["steps"])
        for e in accounting["events"]]))
    return float(accountant.get_epsilon(accounting["delta"]))


def test_student_dp_on_flower_releases_item_sums_once_and_the_manifest_reproduces_epsilon(
        small: Dataset, tmp_path: Path) -> None:
    # Execute: student-level DP with the item release (the default share), in-process Flower engine
    plan = FlowerTraining(clients=3, rounds=2, dp="student", epsilon=EPSILON, delta=DELTA, seed=2,
                          model_kind="higher-order-irt")
    # the last round's weights are served, so the check on item_delta below sees what the rounds did to it
    result = train_flower(dataset=small, plan=plan, out_dir=tmp_path / "run", config=FlowerConfig(keep="last"))
    options = {"clients": 3, "rounds": 2, "dp": "student", "epsilon": EPSILON, "delta": DELTA, "seed": 2}
    published = publish_trained(result, dataset=small, registry=tmp_path / "registry", options=options, force=True)
    manifest = ModelRegistry(tmp_path / "registry").load().manifest

    # Assert: the release is stated and charged first, once; dp_accounting recomputes the configured ε from it
    release = manifest["config"]["training"]["item_release"]
    accounting = manifest["privacy_accounting"]
    sigma = release_noise(epsilon=EPSILON * plan.item_release_share, delta=DELTA)
    assert release["noise_multiplier"] == pytest.approx(sigma) and release["clients"] == 3
    assert release["pooled_noise_sd"] == pytest.approx(sigma * math.sqrt(3))  # each client noised at the full σ
    assert accounting["events"][0] == {"noise_multiplier": release["noise_multiplier"], "sample_rate": 1.0, "steps": 1}
    assert all(e["sample_rate"] < 1.0 for e in accounting["events"][1:])
    recomputed = _recomputed(accounting)
    assert recomputed == pytest.approx(accounting["epsilon"], rel=1e-6)
    assert recomputed <= EPSILON and recomputed == pytest.approx(EPSILON, abs=0.05)
    assert manifest["epsilon"] == pytest.approx(recomputed, rel=1e-6) and published.epsilon == manifest["epsilon"]
    candidate = manifest["model_selection"]["candidates"][0]
    # keep="last": the start is no candidate, so its AUC is not measured (as in process: candidates.release_start)
    assert candidate["start_heldout_auc"] is None and candidate["served_round"] == 2

    # Assert: the served item_delta is the warm start's (to float rounding in averaging): the rounds held it fixed
    settings = load_settings(tmp_path / "run" / "data")
    start = settings.new_model()
    load_release(tmp_path / "run" / RELEASE_FILE).warm_start(start, load_partition(settings.data_dir,
                                                                                    "evaluation").features.numpy())
    assert not torch.equal(start.item_delta, settings.new_model().item_delta)  # the release moved it ...
    assert torch.allclose(result.model.item_delta, start.item_delta, rtol=0, atol=1e-6)  # ... and no round did


def test_the_release_start_competes_as_round_zero(small: Dataset, tmp_path: Path) -> None:
    # Execute: a budget so small that every DP-SGD round is mostly noise
    plan = FlowerTraining(clients=2, rounds=2, dp="student", epsilon=0.5, seed=4, model_kind="higher-order-irt")
    result = train_flower(dataset=small, plan=plan, out_dir=tmp_path)

    # Assert: the served round is the best of round 0 (the start) and the rounds
    candidate = result.selection["candidates"][0]
    rounds = {r.round: r.auc for r in result.history}
    start = candidate["start_heldout_auc"]
    assert start is not None and candidate["served_round"] in (0, *rounds)
    assert candidate["heldout_auc"] == pytest.approx(max(start, *rounds.values()))
    assert (candidate["served_round"] == 0) == (start >= max(rounds.values()))


def test_candidate_kinds_share_one_release(small: Dataset, tmp_path: Path) -> None:
    # Execute: every candidate kind, one Flower run each, on the same students
    plan = FlowerTraining(clients=2, rounds=1, dp="student", epsilon=EPSILON, seed=3)
    result = train_flower(dataset=small, plan=plan, out_dir=tmp_path)

    # Assert: the first kind's run released; the later ones reused it; it is charged once and ε fits the budget
    kinds = [c["kind"] for c in result.selection["candidates"]]
    assert len(kinds) > 1
    assert (tmp_path / "candidates" / kinds[0] / RELEASE_FILE).exists()
    assert not (tmp_path / "candidates" / kinds[0] / "data" / RELEASE_FILE).exists()
    assert all((tmp_path / "candidates" / k / "data" / RELEASE_FILE).exists() for k in kinds[1:])
    events = result.accountant.history
    assert [q for _, q, _ in events].count(1.0) == 1 and events[0][1] == 1.0
    assert result.accountant.get_epsilon(DELTA) == pytest.approx(EPSILON, abs=0.05)
    assert result.accountant.get_epsilon(DELTA) <= EPSILON


def test_the_composition_charges_the_release_once_and_refuses_a_run_charged_more(small: Dataset) -> None:
    # Prepare: two kinds' runs, each accountant holding the shared release and its own round (as a run leaves it)
    config = plan_config(FlowerConfig(item_release_share=0.5), rounds=1, dp="student", epsilon=EPSILON, delta=DELTA,
                         secagg=False, aggregation="fedavg", candidates=2)
    release, mechanism = release_events(config.item_release_noise), config.fed.round_mechanism()
    model = new_model("higher-order-irt", small.qmatrix, seed=0)
    record = RoundRecord(round=1, sampled_clients=(0,), train_loss=0.0, eval_loss=0.0, auc=0.5, epsilon=None,
                         bytes_sent=0, seconds=0.0, pre_clip_norms={}, student_norm_median=None)

    def run(*events: tuple) -> FedResult:
        return FedResult(model=model, history=[record], stop_reason=None, accountant=charged(events))

    # Execute
    composed = _composed([("a", run(*release, mechanism)), ("b", run(*release, mechanism))], config)

    # Assert: the release once, then each run's round; a run charged anything else is refused
    assert composed is not None and composed.history == charged([*release, mechanism, mechanism]).history
    with pytest.raises(RuntimeError, match="charged more"):
        _composed([("a", run(*release, mechanism)), ("b", run(*release, mechanism, mechanism))], config)


def test_share_zero_keeps_dp_sgd_over_every_parameter(small: Dataset, tmp_path: Path) -> None:
    # Execute
    plan = FlowerTraining(clients=2, rounds=1, dp="student", epsilon=EPSILON, seed=2, model_kind="higher-order-irt",
                          item_release_share=0.0)
    result = train_flower(dataset=small, plan=plan, out_dir=tmp_path)

    # Assert: no release, no frozen parameter, the rounds calibrated to the whole ε as before
    config = load_settings(tmp_path / "data").config
    assert config == plan_config(None, rounds=1, dp="student", epsilon=EPSILON, delta=DELTA, secagg=False,
                                 aggregation="fedavg")
    assert config.item_release_noise is None and config.fed.student_dp.frozen == ()
    assert config.item_release_share == 0.0
    assert not (tmp_path / RELEASE_FILE).exists()
    assert result.item_release is None and result.start_auc is None
    assert all(q < 1.0 for _, q, _ in result.accountant.history)
    with pytest.raises(ValueError, match="item_release_share"):
        FlowerTraining(clients=2, rounds=1, dp="student", epsilon=1.0, item_release_share=1.0)


def test_a_client_releases_once_per_run_and_passes_other_messages_through(small: Dataset) -> None:
    # Prepare: a client of a run configured for the release, and its node's context
    plan = FlowerTraining(clients=2, rounds=1, dp="student", epsilon=EPSILON, seed=2, model_kind="higher-order-irt")
    config = plan_config(FlowerConfig(item_release_share=plan.item_release_share), rounds=1, dp="student",
                         epsilon=EPSILON, delta=DELTA, secagg=False, aggregation="fedavg")
    model = new_model("higher-order-irt", small.qmatrix, seed=0)
    client = CDClient(model, encode_dataset(small, table=model.item_table(small.qmatrix)), config=config)
    mod = ItemReleaseMod(lambda _: ReleaseInputs(model, client.data, config.item_release_noise, client.generator))
    unconfigured = ItemReleaseMod(lambda _: ReleaseInputs(model, client.data, plan_config(
        None, rounds=1, dp="student", epsilon=EPSILON, delta=DELTA, secagg=False, aggregation="fedavg"
    ).item_release_noise, client.generator))
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    passed: list[str] = []

    def call_next(msg: Message, ctx: Context) -> Message:
        passed.append(msg.metadata.message_type)
        return Message(RecordDict(), reply_to=msg)

    with _task_identity(run_id=1):
        def ask(kind: str) -> Message:
            return Message(RecordDict({"config": ConfigRecord({"seed": 7})}), 1, kind)

        # Execute
        reply = mod(ask(MESSAGE_TYPE), context, call_next)
        mod(ask("train"), context, call_next)

        # Assert: four noisy vectors of the bank's and groups' sizes; a second request is refused
        arrays = reply.content.array_records["sums"].to_numpy_ndarrays()
        assert [len(a) for a in arrays[:2]] == [len(model.items) + 1] * 2 and len(arrays) == 4
        assert passed == ["train"]
        with pytest.raises(PermissionError, match="already released"):
            mod(ask(MESSAGE_TYPE), context, call_next)
        with pytest.raises(PermissionError, match="not configured"):  # a run without a release gets none
            unconfigured(ask(MESSAGE_TYPE), Context(run_id=2, node_id=1, node_config={}, state=RecordDict(),
                                                    run_config={}), call_next)


def test_federation_nodes_release_once_and_the_coordinator_manifest_states_it(small: Dataset, tmp_path: Path) -> None:
    # Prepare: three institutions, each with its own CSV, and a coordinator run configured for the release
    q = small.qmatrix
    model = new_model("higher-order-irt", q, seed=0)
    parts = [small.students[k::4] for k in range(4)]  # three institutions, the fourth share held out
    nodes = []
    for k, students in enumerate(parts[:3]):
        lines = ["student_id,item_id,correct"] + [f"{s.student_id},{r.item_id},{int(r.score)}"
                                                  for s in students for r in s.responses]
        (tmp_path / f"node-{k}.csv").write_text("\n".join(lines) + "\n")
        save_qmatrix(q, tmp_path / f"node-{k}.json")
        nodes.append({"data-path": str(tmp_path / f"node-{k}.csv"), "qmatrix-path": str(tmp_path / f"node-{k}.json")})
    config = plan_config(FlowerConfig(keep="last", item_release_share=0.5), rounds=2, dp="student", epsilon=EPSILON,
                         delta=DELTA, secagg=False, aggregation="fedavg")
    write_server_run(tmp_path / "data", config=config, model=model, seed=1, n_clients=3,
                     evaluation=encode_students(q, parts[3], table=model.item_table(q)),
                     qmatrix_sha256=qmatrix_fingerprint(q))
    replies: list[Message] = []

    class Recording(LocalGrid):
        def _deliver(self, message: Message) -> Message:
            replies.append(super()._deliver(message))
            return replies[-1]

    # Execute
    result = run_grid(Recording(make_node_client_app(), nodes, run_config=run_config(tmp_path / "data", tmp_path)))
    published = publish_federated(result, qmatrix=q, heldout=parts[3], registry=tmp_path / "registry", force=True,
                                  options={"dp": "student", "delta": DELTA}, federation={"nodes": 3})

    # Assert: every node released once, four vectors and nothing else; the rounds held item_delta at the start
    released = [r for r in replies if r.metadata.message_type == MESSAGE_TYPE]
    assert len(released) == 3 and not [r for r in released if r.has_error()]
    assert all(list(r.content.array_records) == ["sums"] and not r.content.metric_records
               and not r.content.config_records for r in released)
    start = load_settings(tmp_path / "data").new_model()
    load_release(tmp_path / RELEASE_FILE).warm_start(start, encode_students(q, parts[3], table=model.item_table(q))
                                                     .features.numpy())
    assert torch.allclose(result.model.item_delta, start.item_delta, rtol=0, atol=1e-6)
    manifest = published.manifest
    assert manifest["config"]["training"]["item_release"]["clients"] == 3
    assert _recomputed(manifest["privacy_accounting"]) == pytest.approx(EPSILON, abs=0.05)
    assert manifest["privacy_accounting"]["events"][0]["sample_rate"] == 1.0
