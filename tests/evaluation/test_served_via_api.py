"""The served row measured through a running gateway (issue 21): the evaluation's train and validation students
uploaded as a tenant's history to a fresh `fedcd serve`, trained and calibrated by its jobs, then every validation
and test student diagnosed over HTTP — scored beside the in-process `served` row on the same held-out responses.

SIMULATED students (DINA on the example Q-matrix) and SIMULATED entities; a real gateway process on loopback.
Nothing asserts time; the job waits are bounded by ServedViaApi.max_seconds.
"""

from __future__ import annotations

from evaluation.served_api import GatewayDefaults, ServedViaApi
from diagnosis import NoiseLevel
from evaluation.protocols import EvaluationConfig, evaluate
from evaluation.results import VIA_API_ROW
from evaluation.served import LocalFedTraining, ServedConfig
from providers import EntitySpec
from providers.simulated import simulated_family
from qmatrix import example_qmatrix, simulate_dina


async def test_the_row_served_through_the_api_is_scored_beside_the_in_process_served_row(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Prepare: 160 SIMULATED students; the gateway process gets the same served defaults as this evaluation.
    monkeypatch.setenv("FEDCD_PRIVACY_CAP_EPSILON", "100000")
    data = simulate_dina(example_qmatrix(), n_students=160, seed=3)
    noise = NoiseLevel(mechanism="piecewise", epsilon=32.0, sensitivity="assessed")
    served = ServedConfig(noise=noise, local_fed=LocalFedTraining(rounds=2, threads=1))
    settings = GatewayDefaults(default_mechanism="piecewise", default_epsilon=32.0, sensitivity="assessed",
                               default_calibration_method="stacking")
    specs = [EntitySpec(name=e.name, kind="simulated", simulated_style=e.style, seed=3)
             for e in simulated_family(seed=3).values()]
    messages: list[str] = []
    via = ServedViaApi(settings, specs, seed=3, release_epsilon=None, rounds=2, concurrency=4, max_seconds=600,
                       progress=messages.append)

    # Execute
    config = EvaluationConfig(protocol="heldout", epsilons=[], seed=3, served=served)
    result = await evaluate(data, simulated_family(seed=3), config, served_via=via)

    # Assert: the row is there, on the same responses as every other row, at the served noise
    rows = {(r.name, r.epsilon): r for r in result.rows}
    api, in_process = rows[(VIA_API_ROW, 32.0)], rows[("served", 32.0)]
    assert api.mechanism == "piecewise" and api.n == in_process.n > 0
    assert abs(api.auc - in_process.auc) < 0.1, (api, in_process)  # the same model, trained and calibrated over HTTP
    # It diagnoses: far above chance and near item difficulty. The gateway's noise is unseeded and only 64 held-out
    # responses are scored (AUC's standard error about 0.07), so one run read 0.704 against item difficulty's 0.739:
    # the margin is the sampling noise, while a pipeline that lost the signal would read about 0.5.
    assert api.auc > 0.6 and api.auc > rows[("item-difficulty", None)].auc - 0.1, (api, rows[("item-difficulty", None)])
    # ... from the tenant's own trained model and calibration, for every student diagnosed
    split = result.split
    assert via.facts["uploaded_students"] == split["train"] + split["validation"]  # test students never uploaded
    assert via.facts["train_job"]["validation_students"] == split["validation"]
    assert via.facts["train_job"]["gate_accepted"] and via.facts["train_job"]["rounds"] == 2
    assert via.facts["bases"] == {"validation": {"trained v0001, calibrated": split["validation"]},
                                  "test": {"trained v0001, calibrated": split["test"]}}
    assert any(d["row"] == VIA_API_ROW and d["baseline"] == "served" for d in result.significance)
    assert any("uploading" in m for m in messages)
