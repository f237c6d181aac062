"""The signed model registry (publish, verify, load, tamper refusal, rollback) and the promotion gate."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path

import pytest
import torch

from federated import CDModel
from federated.gate import GatePolicy, canary_students, promotion_gate
from federated.registry import ModelNotFound, ModelRegistry, RegistryError, SignatureInvalid
from qmatrix import QMatrix
from tests.federated.conftest import Prepared

CONCEPTS = ("a", "b", "c")


def _model(seed: int = 0) -> CDModel:
    model = CDModel(CONCEPTS, generator=torch.Generator().manual_seed(seed))
    model.mark_seen({"i1", "i2"})
    return model


def _fields(**extra: object) -> dict[str, object]:
    return {"rounds": 3, "dp_mode": "client", "epsilon": 2.5, "delta": 1e-5, "trained_at": "2025-01-01T00:00:00Z",
            "heldout_metrics": {"auc": 0.8, "loss": float("nan")}, "qmatrix_id": "q", "config": {"training": {}},
            **extra}


def _publish(registry: ModelRegistry, seed: int = 0) -> str:
    version, _ = registry.publish(_model(seed), manifest=_fields())
    return version


def test_sign_verify_load_round_trip(tmp_path: Path) -> None:
    # Prepare
    registry, model = ModelRegistry(tmp_path / "reg"), _model()

    # Execute
    version, manifest = registry.publish(model, manifest=_fields())
    loaded = registry.load()

    # Assert
    assert version == "v0001" and registry.active_version() == "v0001" and loaded.signature_verified
    for name, tensor in model.state_dict().items():
        if isinstance(tensor, torch.Tensor):
            assert torch.equal(tensor, loaded.model.state_dict()[name])
    assert loaded.model.seen_item_ids == {"i1", "i2"} and loaded.model.config() == model.config()
    assert loaded.manifest == manifest
    assert manifest["epsilon"] == 2.5 and manifest["dp_mode"] == "client" and manifest["rounds"] == 3
    assert manifest["heldout_metrics"]["loss"] is None  # NaN is stored as null, JSON stays standard
    assert manifest["config"]["model"] == model.config() and manifest["concepts"] == list(CONCEPTS)
    assert len(manifest["weights"]["sha256"]) == 64 and manifest["key_id"].startswith("ed25519:")
    assert stat.S_IMODE(registry.key_path.stat().st_mode) == 0o600
    assert registry.public_key_path.exists()


def test_versions_are_numbered_in_order_and_listed(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    assert [_publish(registry, s) for s in range(3)] == ["v0001", "v0002", "v0003"]
    rows = registry.list_versions()
    assert [r["version"] for r in rows] == ["v0001", "v0002", "v0003"]
    assert all(r["verified"] for r in rows) and [r["active"] for r in rows] == [False, False, True]


def test_tampered_weights_are_refused(tmp_path: Path) -> None:
    # Prepare
    registry = ModelRegistry(tmp_path)
    _publish(registry)
    weights = tmp_path / "versions" / "v0001" / "model.pt"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))

    # Execute / Assert
    with pytest.raises(SignatureInvalid, match="weights SHA-256 .* does not match the signed manifest"):
        registry.load()
    assert "weights" in registry.list_versions()[0]["error"]


def test_tampered_manifest_is_refused(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    _publish(registry)
    path = tmp_path / "versions" / "v0001" / "manifest.json"
    path.write_text(path.read_text().replace('"epsilon": 2.5', '"epsilon": 0.5'))
    with pytest.raises(SignatureInvalid, match="signature does not verify"):
        registry.load("v0001")


def test_manifest_moved_to_another_version_is_refused(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    _publish(registry, 0)
    _publish(registry, 1)
    for name in ("manifest.json", "manifest.sig", "model.pt"):
        (tmp_path / "versions" / "v0002" / name).write_bytes((tmp_path / "versions" / "v0001" / name).read_bytes())
    with pytest.raises(SignatureInvalid, match="moved between versions"):
        registry.load("v0002")


def test_a_model_signed_by_another_key_is_refused(tmp_path: Path) -> None:
    _publish(ModelRegistry(tmp_path / "a"))
    ModelRegistry(tmp_path / "b")._private_key()  # a second key pair
    pinned = ModelRegistry(tmp_path / "a", public_key_path=tmp_path / "b" / "keys" / "signing_key.pub.pem")
    with pytest.raises(SignatureInvalid, match="signed by another key"):
        pinned.load()


def test_rollback_changes_the_active_version_and_undo_goes_back(tmp_path: Path) -> None:
    # Prepare
    registry = ModelRegistry(tmp_path)
    for seed in range(3):
        _publish(registry, seed)

    # Execute / Assert
    assert registry.rollback("v0001") == "v0001" and registry.active_version() == "v0001"
    assert torch.equal(registry.load().model.prior, _model(0).prior)
    assert registry.rollback() == "v0003"  # undo: back to the version active before
    assert registry.rollback() == "v0002"
    with pytest.raises(ModelNotFound, match="no earlier active version"):
        registry.rollback()


def test_rollback_to_a_tampered_version_is_refused_and_active_is_kept(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    _publish(registry, 0)
    _publish(registry, 1)
    (tmp_path / "versions" / "v0001" / "manifest.sig").write_text("AAAA\n")
    with pytest.raises(SignatureInvalid):
        registry.rollback("v0001")
    assert registry.active_version() == "v0002"


def test_missing_versions_and_unsafe_keys_are_clear_errors(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    with pytest.raises(ModelNotFound, match="no active model"):
        registry.load()
    with pytest.raises(ModelNotFound, match="not a version id"):
        registry.load("../etc")
    _publish(registry)
    with pytest.raises(ModelNotFound, match="no model version v0009"):
        registry.rollback("v0009")
    os.chmod(registry.key_path, 0o644)
    with pytest.raises(RegistryError, match="must be private"):
        _publish(registry)


def test_key_path_can_live_outside_the_registry(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path / "reg", key_path=tmp_path / "secrets" / "fedcd.pem")
    _publish(registry)
    assert (tmp_path / "secrets" / "fedcd.pub.pem").exists() and not (tmp_path / "reg" / "keys").exists()
    assert ModelRegistry(tmp_path / "reg", public_key_path=tmp_path / "secrets" / "fedcd.pub.pem").load()


def test_each_qmatrix_has_its_own_active_version_and_rollback(tmp_path: Path) -> None:
    # Prepare: two versions for "q", two for "r", interleaved.
    registry = ModelRegistry(tmp_path)
    for seed, qmatrix_id in enumerate(("q", "r", "q", "r")):
        registry.publish(_model(seed), manifest=_fields(qmatrix_id=qmatrix_id))

    # Execute / Assert
    assert registry.active_versions() == {"q": "v0003", "r": "v0004"}
    assert registry.load(qmatrix_id="q").version == "v0003" and registry.active_version("r") == "v0004"
    assert [row["version"] for row in registry.list_versions("r")] == ["v0002", "v0004"]
    assert registry.rollback(qmatrix_id="q") == "v0001"
    assert registry.active_versions() == {"q": "v0001", "r": "v0004"}  # r is untouched
    with pytest.raises(RegistryError, match="trained for Q-matrix 'q', not 'r'"):
        registry.rollback("v0001", qmatrix_id="r")
    with pytest.raises(RegistryError, match="several Q-matrices"):
        registry.active_version()
    assert registry.active_version("unknown") is None
    with pytest.raises(ModelNotFound, match="for Q-matrix 'unknown'"):
        registry.load(qmatrix_id="unknown")


def test_a_manifest_without_qmatrix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="needs 'qmatrix_id'"):
        ModelRegistry(tmp_path).publish(_model(), manifest={"rounds": 1})


def test_a_legacy_single_pointer_is_read_and_migrated(tmp_path: Path) -> None:
    # Prepare: a registry written before per-Q-matrix pointers (one active.json).
    registry = ModelRegistry(tmp_path)
    registry.publish(_model(0), manifest=_fields(), activate=False)
    registry.publish(_model(1), manifest=_fields(), activate=False)
    (tmp_path / "active.json").write_text('{"version": "v0001", "previous": []}')

    # Execute / Assert
    assert registry.active_versions() == {"q": "v0001"} and registry.load().version == "v0001"
    registry.activate("v0002")
    assert not (tmp_path / "active.json").exists() and registry.active_version("q") == "v0002"
    assert registry.rollback() == "v0001"


def test_the_pointer_stamp_changes_when_a_version_is_activated(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    empty = registry.pointer_stamp("q")
    _publish(registry, 0)
    first = registry.pointer_stamp("q")
    _publish(registry, 1)
    assert len({empty, first, registry.pointer_stamp("q")}) == 3
    assert registry.pointer_stamp("q") == registry.pointer_stamp("q")


# --- promotion gate -------------------------------------------------------------------------


def _heldout(sim: Prepared) -> list:
    ids = set(sim.test_ids)
    return [s for s in sim.dataset.students if s.student_id in ids]


@pytest.fixture(scope="module")
def second(sim: Prepared) -> CDModel:
    """Another model trained like ``trained`` but from other seeds: a comparable candidate."""
    from federated import LocalConfig, train_local

    model = CDModel(sim.dataset.qmatrix.concepts, generator=torch.Generator().manual_seed(5))
    train_local(model, sim.train, config=LocalConfig(epochs=20), generator=torch.Generator().manual_seed(6))
    return model


def test_gate_accepts_a_comparable_model(sim: Prepared, trained: CDModel, second: CDModel) -> None:
    decision = promotion_gate(second, active=trained, qmatrix=sim.dataset.qmatrix, heldout=_heldout(sim),
                              active_version="v0001")
    assert decision.accepted and not decision.forced
    assert abs(decision.candidate_auc - decision.active_auc) < 0.02 and decision.canary_shift < 0.15


def test_gate_refuses_an_auc_drop(sim: Prepared, trained: CDModel) -> None:
    # Prepare: flipping the decoder's item weights breaks predictions but not mastery.
    candidate = copy.deepcopy(trained)
    with torch.no_grad():
        candidate.item_w.mul_(-5)

    # Execute
    decision = promotion_gate(candidate, active=trained, qmatrix=sim.dataset.qmatrix, heldout=_heldout(sim))

    # Assert
    assert not decision.accepted and decision.canary_shift == pytest.approx(0.0)
    assert decision.reasons[0].startswith("held-out AUC") and decision.active_auc - decision.candidate_auc > 0.02


def test_gate_refuses_a_canary_shift_and_force_overrides(sim: Prepared, trained: CDModel) -> None:
    # Prepare: raising every prior moves every mastery, while rankings (AUC) barely change.
    candidate = copy.deepcopy(trained)
    with torch.no_grad():
        candidate.prior.add_(2.0)
    kwargs = {"active": trained, "qmatrix": sim.dataset.qmatrix, "heldout": _heldout(sim)}

    # Execute
    refused = promotion_gate(candidate, **kwargs)
    forced = promotion_gate(candidate, **kwargs, force=True)

    # Assert
    assert not refused.accepted and refused.canary_shift > 0.15 and refused.reasons[0].startswith("canary")
    assert forced.accepted and forced.forced and forced.reasons == refused.reasons
    assert forced.to_dict()["forced"] is True


def test_gate_thresholds_are_configurable(sim: Prepared, trained: CDModel, second: CDModel) -> None:
    strict = GatePolicy(max_canary_shift=0.001)
    decision = promotion_gate(second, active=trained, qmatrix=sim.dataset.qmatrix, heldout=_heldout(sim),
                              policy=strict)
    assert not decision.accepted


def test_gate_without_active_model_accepts_and_incomparable_needs_force(sim: Prepared, trained: CDModel) -> None:
    q = sim.dataset.qmatrix
    assert promotion_gate(trained, active=None, qmatrix=q, heldout=_heldout(sim)).accepted
    other = CDModel(("x", "y"))
    refused = promotion_gate(trained, active=other, qmatrix=q, heldout=_heldout(sim))
    assert not refused.accepted and "cannot be compared" in refused.reasons[0]
    assert promotion_gate(trained, active=other, qmatrix=q, heldout=_heldout(sim), force=True).forced


def test_canary_students_are_fixed_for_a_qmatrix(sim: Prepared) -> None:
    q: QMatrix = sim.dataset.qmatrix
    first, again = canary_students(q, count=20, seed=1), canary_students(q, count=20, seed=1)
    assert first == again and json.dumps([s.model_dump() for s in first])
