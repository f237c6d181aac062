"""`fedcd bench cost` on a tiny SIMULATED dataset: the modes' calls, cost and AUC, the cache hit rate, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnosis import NoiseLevel
from evaluation.cost import CostBenchResult, run_cost_bench, thresholds_from
from evaluation.cost_report import write_cost_report
from evaluation.served import LocalFedTraining, ServedConfig
from qmatrix import example_qmatrix, simulate_dina

SERVED = ServedConfig(noise=NoiseLevel(mechanism="piecewise", epsilon=32.0, sensitivity="assessed"),
                      local_fed=LocalFedTraining(rounds=2, threads=1))
NEVER, ALWAYS = 0.01, 1.0  # no interval is narrower than 0.01; every one is narrower than 1


@pytest.fixture(scope="module")
def bench() -> CostBenchResult:
    import asyncio

    dataset = simulate_dina(example_qmatrix(), n_students=60, seed=3, student_prefix="tiny")
    return asyncio.run(run_cost_bench(dataset, config=SERVED, thresholds=[ALWAYS, NEVER], seed=0, concurrency=4))


def test_asking_all_pays_every_hosted_stand_in(bench: CostBenchResult) -> None:
    base = bench.baseline
    assert (base.paid_calls_per_student, base.calls_per_student, base.failed) == (3.0, 4.0, 0)
    assert base.cost_usd_per_student > 0 and base.students == bench.split["validation"] + bench.split["test"]
    assert {e["name"]: e["tier"] for e in bench.entities} == {
        "sim:confident": 1, "sim:conservative": 1, "sim:specialist": 1, "local-fed": 0,
    }


def test_a_tier_0_that_is_always_sure_pays_nothing(bench: CostBenchResult) -> None:
    row = next(r for r in bench.rows if r.threshold == ALWAYS)
    assert (row.paid_calls_per_student, row.cost_usd_per_student, row.escalated_share) == (0.0, 0.0, 0.0)
    assert bench.paid_call_cut(row) == 1.0


def test_escalating_every_student_reproduces_ask_all_on_the_same_noise(bench: CostBenchResult) -> None:
    row = next(r for r in bench.rows if r.threshold == NEVER)
    assert row.escalated_share == 1.0 and row.paid_calls_per_student == 3.0
    assert row.cost_usd_per_student == pytest.approx(bench.baseline.cost_usd_per_student)
    assert [row.auc_loss, row.auc_loss_low, row.auc_loss_high] == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)  # common random numbers: same answers, same noise


def test_the_cache_hit_rate_counts_repeated_response_patterns() -> None:
    import asyncio

    from evaluation.cost import cache_hit_rate, hosted_stand_ins

    dataset = simulate_dina(example_qmatrix(), n_students=80, seed=5, student_prefix="c")
    patterns = {tuple((r.item_id, r.score) for r in s.responses) for s in dataset.students}
    cache = asyncio.run(cache_hit_rate(dataset, hosted_stand_ins(0)))
    assert cache["hit_rate"] == pytest.approx(1 - len(patterns) / len(dataset.students))
    assert all(e["hits"] == len(dataset.students) - len(patterns) for e in cache["entities"].values())


def test_the_report_names_the_command_and_the_simulated_entities(bench: CostBenchResult, tmp_path: Path) -> None:
    paths = write_cost_report(bench, tmp_path, command="fedcd bench cost --dataset tiny")
    assert [p.name for p in paths] == ["results.json", "report.md", "cost_auc.png"]
    report = (tmp_path / "report.md").read_text()
    assert "fedcd bench cost --dataset tiny" in report and "SIMULATED" in report
    data = json.loads((tmp_path / "results.json").read_text())
    always = next(r for r in bench.rows if r.threshold == ALWAYS)
    # The largest paid-call cut within 0.005 AUC of all: ALWAYS (cut 100 %) if it is close enough, else NEVER (0 %).
    assert data["recommended_threshold"] == (ALWAYS if always.auc_loss <= 0.005 else NEVER)
    assert [(r["mode"], r["threshold"]) for r in data["rows"]] == [
        ("all", None), ("calibrated", None), ("selective", NEVER), ("selective", ALWAYS)]
    assert "| calibrated |" in report and "ε / student" in report


def test_the_calibrated_mode_asks_whom_the_calibration_weights_and_charges_accordingly(bench: CostBenchResult) -> None:
    calibrated = next(r for r in bench.rows if r.mode == "calibrated")
    base = bench.baseline
    # Every entity here answers every validation student, so only a stacking weight of 0 can leave one out
    assert calibrated.calls_per_student <= base.calls_per_student
    assert calibrated.epsilon_per_student == pytest.approx(32.0 * calibrated.calls_per_student)
    assert base.epsilon_per_student == pytest.approx(32.0 * base.calls_per_student)
    assert calibrated.latency_ms_p50 > 0 and calibrated.latency_ms_p95 >= calibrated.latency_ms_p50


def test_no_thresholds_means_no_selective_rows() -> None:
    assert thresholds_from("none") == []


@pytest.mark.parametrize("text", ["", "0", "1.5", "0.3,-1"])
def test_thresholds_must_lie_in_0_1(text: str) -> None:
    with pytest.raises(ValueError, match="thresholds"):
        thresholds_from(text)


@pytest.mark.llm
def test_the_embedded_llms_join_tier_0_for_free() -> None:
    import asyncio

    dataset = simulate_dina(example_qmatrix(), n_students=20, seed=5, student_prefix="tiny")
    result = asyncio.run(run_cost_bench(dataset, config=SERVED, thresholds=[ALWAYS], seed=0, concurrency=2,
                                        embedded=True))
    tiers = {e["name"]: e["tier"] for e in result.entities}
    assert tiers["smollm2"] == tiers["gemma3"] == tiers["local-fed"] == 0
    base = result.baseline
    assert (base.paid_calls_per_student, base.calls_per_student) == (3.0, 6.0)  # the LLMs are asked, never paid
    selective = next(r for r in result.rows if r.threshold == ALWAYS)
    # Who is worth asking is the calibration's call: on these 20 SIMULATED students a SIMULATED hosted member beats
    # the stack by more than one standard error and replaces it (calibration.selection), so the free tier holds
    # nobody worth asking and the one paid member is asked. Never more than that, never the LLMs' way of paying.
    assert selective.paid_calls_per_student <= 1.0 and selective.calls_per_student <= base.calls_per_student
    assert selective.cost_usd_per_student <= base.cost_usd_per_student
