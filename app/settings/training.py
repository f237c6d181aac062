"""The federated-trained models: first-start training, the signed registry, upload-and-train (``FEDCD_TRAIN_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

__all__ = ["TrainingSettings"]


class TrainingSettings(BaseModel):
    """Where models are kept and signed, and how an upload's model is trained."""

    train_default_model: bool = Field(
        default=True, description="at first start, train a small local-fed model on SIMULATED data if none exists"
    )
    model_registry_dir: Path | None = Field(default=None, description="signed model versions; default <state_dir>/models")
    model_signing_key: Path | None = Field(default=None, description="Ed25519 private key; default in the registry")
    # Upload and train (POST /v1/qmatrices/{id}/train, app.services.training).
    train_min_students: int = Field(default=30, ge=5, description="students an upload needs to train on")
    # An upload is bounded by the 16 MiB body limit too; these bound the work and the job row it makes.
    train_max_students: int = Field(default=50_000, ge=5, description="students one upload may hold (more: 422)")
    train_max_responses: int = Field(
        default=500_000, ge=1, description="responses (CSV rows) one upload may hold (more: 422)"
    )
    train_max_stored_bytes: int = Field(
        default=64 << 20, ge=1024,
        description="bytes of training uploads one tenant may have waiting on disk for their jobs (more: 409)",
    )
    train_rounds: int = Field(default=10, ge=1, le=200, description="training rounds of an upload's model")
    train_calibration_fraction: float = Field(
        default=0.2, ge=0.0, lt=1.0, description="share of an upload's students kept for its calibration"
    )
    train_calibration_students: int = Field(
        default=50, ge=0, description="at most this many calibration students (each asks every entity); 0: none"
    )
    train_seed: int = Field(default=0, ge=0, description="seed of an upload's split and training")
