"""The diagnosis pipeline: fan-out, Q-filtering, privatization inside the entity boundary, failures."""

from __future__ import annotations

import logging

import pytest

from diagnosis import AllEntitiesFailed, DiagnosisPipeline, UnknownEntities
from privacy import LaplaceMechanism, make_rng
from providers import EntityRejected, EntitySkipped, EntityUnavailable
from qmatrix import QMatrixError, Response, example_qmatrix
from tests.factories import FakeEntity, diagnosis_request

Q = example_qmatrix()


_request = diagnosis_request


async def test_entities_are_asked_only_about_q_filtered_concepts() -> None:
    fake = FakeEntity("a", 0.4)
    result = await DiagnosisPipeline({"a": fake}).diagnose(_request())
    expected = ("Add and subtract fractions", "Solve two-step linear equations")
    assert fake.contexts[0].concepts == expected
    assert result.concepts == expected
    assert set(result.mastery) == set(expected)
    assert [i.concepts for i in fake.contexts[0].items] == [Q.item("q01").concepts, Q.item("q10").concepts]


async def test_no_student_identifier_reaches_an_entity() -> None:
    fake = FakeEntity("a", 0.4)
    await DiagnosisPipeline({"a": fake}).diagnose(_request(student_id="alice-SECRET-7"))
    assert "alice-SECRET-7" not in fake.contexts[0].model_dump_json()


async def test_entities_are_asked_concurrently() -> None:
    # Each fake holds its call open; all three must be in flight together for the gather to finish.
    fakes = {n: FakeEntity(n, 0.5, delay_s=0.05) for n in "abc"}
    pipeline = DiagnosisPipeline(fakes)
    in_flight: list[int] = []

    class Probe(FakeEntity):
        async def respond(self, context):  # type: ignore[no-untyped-def]
            in_flight.append(sum(f.in_flight for f in fakes.values()))
            return await super().respond(context)

    pipeline.entities["probe"] = Probe("probe", 0.5, delay_s=0.01)
    await pipeline.diagnose(_request())
    assert in_flight == [3]  # the probe started while a, b and c were all still answering


async def test_without_noise_the_result_is_the_mean_of_the_answers() -> None:
    pipeline = DiagnosisPipeline({"a": FakeEntity("a", 0.2), "b": FakeEntity("b", 0.6)})
    result = await pipeline.diagnose(_request())
    assert all(v == pytest.approx(0.4) for v in result.mastery.values())
    assert result.privacy["mechanism"] == "none"


async def test_noise_is_added_per_entity_before_aggregation_with_the_paper_sensitivity() -> None:
    # Prepare: with the pipeline's seed we can replay exactly the noise each entity got.
    pipeline = DiagnosisPipeline({"a": FakeEntity("a", 0.3), "b": FakeEntity("b", 0.7)}, seed=123)
    result = await pipeline.diagnose(_request(epsilon=2.0))
    mechanism = LaplaceMechanism(epsilon=2.0, sensitivity=len(Q.concepts))
    rng = make_rng(123)
    concepts = result.concepts
    expected_a = mechanism.privatize({c: 0.3 for c in concepts}, rng)
    expected_b = mechanism.privatize({c: 0.7 for c in concepts}, rng)
    outcomes = {o.name: o for o in result.entities}
    # Assert: what the pipeline kept is the privatized value, never the raw 0.3 / 0.7.
    assert outcomes["a"].mastery == pytest.approx(expected_a)
    assert outcomes["b"].mastery == pytest.approx(expected_b)
    for c in concepts:
        assert result.mastery[c] == pytest.approx((expected_a[c] + expected_b[c]) / 2)
    assert result.privacy == {"mechanism": "laplace", "epsilon": 2.0, "sensitivity": 6.0, "noise_scale": 3.0}


async def test_assessed_sensitivity_uses_the_number_of_assessed_concepts() -> None:
    result = await DiagnosisPipeline({"a": FakeEntity("a", 0.5)}).diagnose(_request(epsilon=1.0, sensitivity="assessed"))
    assert result.privacy["sensitivity"] == 2.0


async def test_raw_predictions_never_appear_in_results_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    raw = 0.123456789
    pipeline = DiagnosisPipeline({"a": FakeEntity("a", raw), "b": FakeEntity("b", error=EntityUnavailable("boom"))})
    with caplog.at_level(logging.DEBUG):
        result = await pipeline.diagnose(_request(epsilon=1.0))
    assert "0.123456789" not in repr(result)
    assert "0.123456789" not in caplog.text


async def test_failed_entities_are_left_out_and_named() -> None:
    pipeline = DiagnosisPipeline(
        {"good": FakeEntity("good", 0.8), "bad": FakeEntity("bad", error=EntityRejected("HTTP 401: bad key"))}
    )
    result = await pipeline.diagnose(_request())
    assert all(v == pytest.approx(0.8) for v in result.mastery.values())
    bad = next(o for o in result.entities if o.name == "bad")
    assert bad.status == "failed" and "401" in (bad.error or "") and bad.mastery is None


async def test_all_entities_failing_raises_with_every_reason() -> None:
    pipeline = DiagnosisPipeline(
        {"a": FakeEntity("a", error=EntityUnavailable("HTTP 503")), "b": FakeEntity("b", error=EntityRejected("HTTP 400"))}
    )
    with pytest.raises(AllEntitiesFailed) as info:
        await pipeline.diagnose(_request())
    assert {o.name for o in info.value.outcomes} == {"a", "b"}
    assert "HTTP 503" in str(info.value) and "HTTP 400" in str(info.value)


async def test_a_skipped_entity_is_named_with_its_reason_and_is_not_a_failure() -> None:
    # Prepare
    skipping = FakeEntity("local", error=EntitySkipped("no model for Q-matrix 'example-prealgebra'"))
    pipeline = DiagnosisPipeline({"good": FakeEntity("good", 0.8), "local": skipping})

    # Execute
    result = await pipeline.diagnose(_request())

    # Assert
    local = next(o for o in result.entities if o.name == "local")
    assert local.status == "skipped" and local.mastery is None and local.error == "no model for Q-matrix 'example-prealgebra'"
    assert all(v == pytest.approx(0.8) for v in result.mastery.values())
    assert len(skipping.contexts) == 1 and skipping.contexts[0].qmatrix_id == Q.id


async def test_only_skipped_or_failed_entities_still_raise_all_failed() -> None:
    pipeline = DiagnosisPipeline({"a": FakeEntity("a", error=EntitySkipped("no model")),
                                  "b": FakeEntity("b", error=EntityRejected("HTTP 400"))})
    with pytest.raises(AllEntitiesFailed) as info:
        await pipeline.diagnose(_request())
    assert [o.status for o in info.value.outcomes] == ["skipped", "failed"] and "no model" in str(info.value)


async def test_partial_answers_average_per_concept() -> None:
    concepts = Q.concepts_for(["q01", "q10"])
    pipeline = DiagnosisPipeline({"a": FakeEntity("a", 0.2, missing=[concepts[0]]), "b": FakeEntity("b", 0.6)})
    result = await pipeline.diagnose(_request())
    assert result.mastery[concepts[0]] == pytest.approx(0.6)
    assert result.mastery[concepts[1]] == pytest.approx(0.4)


async def test_unknown_items_and_entities_are_refused_by_name() -> None:
    pipeline = DiagnosisPipeline({"a": FakeEntity("a")})
    with pytest.raises(QMatrixError, match="nope"):
        await pipeline.diagnose(_request(responses=[Response(item_id="nope", correct=True)]))
    with pytest.raises(UnknownEntities, match="ghost"):
        await pipeline.diagnose(_request(entities=["ghost"]))


async def test_entity_selection_asks_only_the_named_entities() -> None:
    a, b = FakeEntity("a", 0.1), FakeEntity("b", 0.9)
    result = await DiagnosisPipeline({"a": a, "b": b}).diagnose(_request(entities=["b"]))
    assert not a.contexts and len(b.contexts) == 1
    assert [o.name for o in result.entities] == ["b"]
