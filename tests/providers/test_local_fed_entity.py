"""The ``local-fed`` entity: the registry's verified model answering PromptContexts directly."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import torch

from federated.registry import ModelRegistry
from federated.publish import PublishOptions
from federated.train import TrainingConfig, default_model_if_missing, train_federated
from providers.batching import MicroBatcher
from providers.errors import EntityRejected
from providers.local_fed import SPREAD_SHIFTS, LocalFedEntity
from providers.types import Entity, PromptContext, PromptItem
from qmatrix import example_qmatrix, simulate_dina

Q = example_qmatrix()


@pytest.fixture(scope="module")
def registry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A registry holding the default model (trained on SIMULATED students)."""
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("registry")
    assert default_model_if_missing(path, seed=0) == "v0001"
    return path


def _context(items: list[PromptItem], extra_concepts: tuple[str, ...] = ()) -> PromptContext:
    concepts = tuple(c for c in Q.concepts if any(c in item.concepts for item in items))
    return PromptContext(concepts=concepts + extra_concepts, items=tuple(items), qmatrix_id=Q.id)


def _items(scores: list[float] | None = None) -> list[PromptItem]:
    scores = scores or [float(k % 2) for k in range(len(Q.items))]
    return [PromptItem(item_id=i.id, text=i.text, concepts=i.concepts, score=s) for i, s in zip(Q.items, scores)]


async def test_answers_every_concept_in_unit_interval(registry_dir: Path) -> None:
    # Prepare
    entity = LocalFedEntity(registry_dir)
    context = _context(_items())

    # Execute
    prediction = await entity.respond(context)

    # Assert
    assert isinstance(entity, Entity)
    assert prediction.status == "ok" and prediction.missing == [] and prediction.repairs == []
    assert set(prediction.mastery) == set(context.concepts) == set(Q.concepts)
    assert all(0.0 <= v <= 1.0 for v in prediction.mastery.values())
    assert prediction.entity == "local-fed" and prediction.model == "fedcd-cdm/v0001" and not prediction.simulated


async def test_a_correct_answer_never_lowers_a_mastery(registry_dir: Path) -> None:
    entity = LocalFedEntity(registry_dir)
    low = await entity.respond(_context(_items([0.0] * len(Q.items))))
    high = await entity.respond(_context(_items([0.0] * (len(Q.items) - 1) + [1.0])))
    assert all(high.mastery[c] >= low.mastery[c] for c in Q.concepts)


async def test_unseen_items_are_used_and_flagged(registry_dir: Path) -> None:
    # Prepare: a new item id, and a known id whose Q-row differs from the training item's.
    known = Q.items[0]
    other_row = next(c for c in Q.concepts if c not in known.concepts)
    items = [
        PromptItem(item_id="brand-new", text="What is 3/4 + 1/8?", concepts=(Q.concepts[0],), score=1.0),
        PromptItem(item_id=known.id, text=known.text, concepts=(other_row,), score=0.0),
    ]

    # Execute
    prediction = await LocalFedEntity(registry_dir).respond(_context(items))

    # Assert
    flagged = [r.detail for r in prediction.repairs if r.rule == "unseen_item"]
    assert len(flagged) == 2 and "brand-new" in flagged[0] and "another Q-row" in flagged[1]
    assert prediction.status == "ok" and set(prediction.mastery) == {Q.concepts[0], other_row}


async def test_unknown_concepts_are_reported_missing_never_invented(registry_dir: Path) -> None:
    # Prepare
    items = [*_items()[:3], PromptItem(item_id="calc-1", concepts=("Derivatives",), score=1.0),
             PromptItem(item_id="mixed", concepts=(Q.concepts[0], "Derivatives"), score=0.0)]
    context = _context(items, extra_concepts=("Derivatives",))

    # Execute
    prediction = await LocalFedEntity(registry_dir).respond(context)

    # Assert
    assert prediction.status == "partial" and prediction.missing == ["Derivatives"]
    assert set(prediction.mastery) == set(context.concepts) - {"Derivatives"}
    rules = [(r.rule, r.concept) for r in prediction.repairs]
    assert ("unknown_concept", "Derivatives") in rules and sum(r == "item_skipped" for r, _ in rules) == 2


async def test_only_unknown_concepts_gives_an_empty_partial_answer(registry_dir: Path) -> None:
    context = PromptContext(concepts=("Derivatives",), items=(PromptItem(item_id="c", concepts=("Derivatives",),
                                                                         score=1.0),), qmatrix_id=Q.id)
    entity = LocalFedEntity(registry_dir)
    prediction = await entity.respond(context)
    assert prediction.status == "partial" and prediction.mastery == {} and prediction.missing == ["Derivatives"]
    assert entity.forward_passes == 0


async def test_concurrent_calls_share_forward_passes(registry_dir: Path) -> None:
    # Prepare
    entity = LocalFedEntity(registry_dir)
    entity.load()
    contexts = [_context(_items([float((k >> j) & 1) for j in range(len(Q.items))])) for k in range(24)]
    sequential = [await entity.respond(c) for c in contexts]
    passes_before = entity.forward_passes

    # Execute
    together = await asyncio.gather(*(entity.respond(c) for c in contexts))

    # Assert
    assert passes_before == 24 and entity.forward_passes - passes_before < 24
    for a, b in zip(sequential, together, strict=True):
        assert a.mastery == pytest.approx(b.mastery, abs=1e-6)


async def test_micro_batcher_caps_batch_size_and_fails_a_whole_batch() -> None:
    sizes: list[int] = []
    batcher: MicroBatcher[int, int] = MicroBatcher(lambda xs: sizes.append(len(xs)) or [x * 2 for x in xs],
                                                   window_s=0.05, max_batch=4)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(10))) == [i * 2 for i in range(10)]
    assert sizes == [4, 4, 2]

    def boom(xs: list[int]) -> list[int]:
        raise RuntimeError("forward failed")

    failing: MicroBatcher[int, int] = MicroBatcher(boom)
    results = await asyncio.gather(failing.submit(1), failing.submit(2), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results) and failing.batches == 1


def test_info_describes_the_verified_model(registry_dir: Path) -> None:
    info = LocalFedEntity(registry_dir).info()
    assert info["version"] == "v0001" and info["signature_verified"] is True
    assert info["dp_mode"] == "none" and info["epsilon"] is None and info["rounds"] == 20
    assert 0.5 < info["heldout_metrics"]["auc"] <= 1 and info["trained_at"]
    assert info["config"]["model"]["concepts"] == list(Q.concepts) and "training" in info["config"]


async def test_a_newly_published_version_is_served_without_reload(registry_dir: Path, tmp_path: Path) -> None:
    # Prepare: the entity has loaded v0001 and answered with it.
    path = tmp_path / "reg"
    shutil.copytree(registry_dir, path)
    entity = LocalFedEntity(path)
    assert (await entity.respond(_context(_items()))).model == "fedcd-cdm/v0001"

    # Execute: another process publishes v0002, then rolls back.
    data = simulate_dina(Q, n_students=200, seed=5)
    train_federated(dataset=data, registry=path, config=TrainingConfig(rounds=2, seed=5),
                    publish=PublishOptions(force=True))
    after_publish = await entity.respond(_context(_items()))
    ModelRegistry(path).rollback(qmatrix_id=Q.id)
    after_rollback = await entity.respond(_context(_items()))

    # Assert
    assert after_publish.model == "fedcd-cdm/v0002" and after_rollback.model == "fedcd-cdm/v0001"
    assert entity.info(Q.id)["version"] == "v0001"


async def test_a_qmatrix_without_a_model_is_answered_by_the_untrained_evidence_model(
    registry_dir: Path, tmp_path: Path
) -> None:
    entity = LocalFedEntity(registry_dir)
    other = _context(_items()).model_copy(update={"qmatrix_id": "another-qmatrix"})
    for context in (other, other.model_copy(update={"qmatrix_id": None}), _context(_items())):
        prediction = await (LocalFedEntity(tmp_path / "empty") if context is other else entity).respond(context)
        assert prediction.status == "ok" and set(prediction.mastery) == set(context.concepts)
    untrained = await entity.respond(other)
    assert untrained.model == "fedcd-cdm/untrained" and not untrained.repairs  # nothing trained: nothing to flag
    assert (await entity.respond(_context(_items()))).model != "fedcd-cdm/untrained"  # the example keeps its model


async def test_the_untrained_evidence_model_reads_the_evidence(tmp_path: Path) -> None:
    # Every item right vs every item wrong, on a Q-matrix no model was trained for: mastery must follow the answers.
    entity = LocalFedEntity(tmp_path / "empty")
    right = await entity.respond(_context(_items([1.0] * len(Q.items))).model_copy(update={"qmatrix_id": "new"}))
    wrong = await entity.respond(_context(_items([0.0] * len(Q.items))).model_copy(update={"qmatrix_id": "new"}))
    assert all(right.mastery[c] > 0.5 > wrong.mastery[c] for c in right.mastery)


async def test_tampered_model_is_rejected(registry_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "tampered"
    shutil.copytree(registry_dir, path)
    weights = path / "versions" / "v0001" / "model.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(EntityRejected, match="does not match the signed manifest"):
        await LocalFedEntity(path).respond(_context(_items()))


async def test_tagging_is_refused(registry_dir: Path) -> None:
    context = PromptContext(task="tag", concepts=Q.concepts, items=(_items()[0],))
    with pytest.raises(EntityRejected, match="only diagnoses"):
        await LocalFedEntity(registry_dir).respond(context)


async def test_a_tenants_own_model_is_served_to_that_tenant_alone(registry_dir: Path, tmp_path: Path) -> None:
    # Prepare: the operator's model of the example Q-matrix, and tenant a's own model of it (SIMULATED students)
    folder = tmp_path / "registry"
    shutil.copytree(registry_dir, folder)
    result = train_federated(dataset=simulate_dina(Q, n_students=120, seed=3), registry=folder,
                             config=TrainingConfig(rounds=1, seed=3), tenant="a")
    assert result.version == "v0002" and result.manifest is not None and result.manifest["tenant"] == "a"
    entity = LocalFedEntity(folder)

    # Execute
    served = {scope: (await entity.respond(_context(_items()).model_copy(update={"cache_scope": scope}))).model
              for scope in ("a", "b", None)}
    other = _context(_items()).model_copy(update={"cache_scope": "a", "qmatrix_id": "not-trained"})

    # Assert: a gets its own; b and a request without a tenant get the operator's; nobody else's is served
    assert served == {"a": "fedcd-cdm/v0002", "b": "fedcd-cdm/v0001", None: "fedcd-cdm/v0001"}
    assert (await entity.respond(other)).model == "fedcd-cdm/untrained"
    assert ModelRegistry(folder).active_versions() == {"example-prealgebra": "v0001", "tenant:a/example-prealgebra": "v0002"}


async def test_local_feds_uncertainty_is_reported_and_does_not_depend_on_the_scores(tmp_path) -> None:
    # Prepare: the same items answered all right and all wrong, on a Q-matrix with no model (the untrained one)
    from providers import PromptContext, PromptItem
    from providers.local_fed import LocalFedEntity

    def context(score: float) -> PromptContext:
        items = (PromptItem(item_id="a", concepts=("x",), score=score), PromptItem(item_id="b", concepts=("x", "y"),
                                                                                   score=score))
        return PromptContext(concepts=("x", "y"), items=items)

    entity = LocalFedEntity(tmp_path)
    # Execute
    right, wrong = await entity.respond(context(1.0)), await entity.respond(context(0.0))
    # Assert: released next to the privatized mastery, so it must not carry the scores
    assert right.uncertainty == wrong.uncertainty and set(right.uncertainty) == {"x", "y"}
    assert right.uncertainty["x"].answers == 2 and right.uncertainty["y"].answers == 1
    assert not right.uncertainty["x"].measured  # the untrained evidence model's parameters are assumed
    assert right.mastery["x"] > 0.5 > wrong.mastery["x"]


async def test_the_uncertainty_curve_is_computed_only_when_its_reader_asks_for_it(
    registry_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: count the predictive variances (one per point of the curve); the mastery needs none
    import federated.hocdm as hocdm

    calls: list[int] = []
    real = hocdm.predictive_variance

    def counting(*args: object) -> torch.Tensor:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(hocdm, "predictive_variance", counting)
    context = _context(_items())

    # Execute
    with_curve = await LocalFedEntity(registry_dir).respond(context)
    asked = len(calls)
    without = await LocalFedEntity(registry_dir).respond(context.model_copy(update={"own_uncertainty": False}))

    # Assert: the default still sends the curve; a request whose aggregation never reads it computes none
    assert asked == len(SPREAD_SHIFTS) and set(with_curve.uncertainty) == set(context.concepts)
    assert len(calls) == asked and without.uncertainty == {}
    assert without.mastery == with_curve.mastery and without.model == with_curve.model


async def test_one_batch_sends_the_curve_to_the_requests_that_asked_for_it_alone(registry_dir: Path) -> None:
    # Prepare: two concurrent requests share one forward pass; only one aggregation reads uncertainty
    entity = LocalFedEntity(registry_dir, batch_window_s=0.05)
    wants = _context(_items())
    mean_only = _context(_items([0.0, 1.0, 0.0])).model_copy(update={"own_uncertainty": False})

    # Execute
    with_curve, without = await asyncio.gather(entity.respond(wants), entity.respond(mean_only))

    # Assert
    assert entity.forward_passes == 1
    assert set(with_curve.uncertainty) == set(wants.concepts) and without.uncertainty == {}
    assert without.mastery == (await entity.respond(mean_only.model_copy(update={"own_uncertainty": True}))).mastery
