"""Local DP defaults and the default privacy policy (``FEDCD_DEFAULT_EPSILON``, ``FEDCD_PRIVACY_*`` …)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from privacy import EPSILON_MAX, EPSILON_MIN, AnchoredPiecewiseMechanism, MechanismName, requested_name

__all__ = ["PrivacySettings"]


class PrivacySettings(BaseModel):
    """The noise a diagnosis gets when its request names none, the per-student budget, and what leaves the server."""

    # Defaults chosen from the privacy frontier (docs/results/frontier): below ε ≈ 8–32 per entity answer, with
    # Δ = K, every mechanism's posterior returns the population prior. The anchored release keeps the most held-out
    # AUC at ε = 32 (docs/results/frontier/anchored): the served diagnosis stays within 0.02 of noiseless on FrcSub
    # and ASSIST0910, where the plain piecewise split lost 0.08 (docs/results/default-noise).
    default_epsilon: float = Field(
        default=32.0, ge=EPSILON_MIN, le=EPSILON_MAX, description="ε per entity answer when a request gives none"
    )
    default_mechanism: MechanismName = requested_name(AnchoredPiecewiseMechanism)
    sensitivity: Literal["paper", "assessed"] = Field(
        default="assessed", description="default Δ: the concepts a request assesses (assessed) or all K (paper)"
    )
    send_answer_text: bool = Field(
        default=False, description="send students' free-text answers to entities (off: only item text and correctness)"
    )
    # The default privacy policy (a tenant's admin may set its own: /v1/admin/privacy-policy). Why these
    # numbers, and what they mean per diagnosis, day and year: docs/privacy.md, "The default policy".
    privacy_period: Literal["lifetime", "rolling", "day", "week"] = Field(
        default="rolling", description="budget period of the default policy"
    )
    privacy_window_s: float = Field(default=86400.0, ge=60.0, description="rolling period length in seconds")
    privacy_timezone: str = Field(default="UTC", description="time zone of calendar periods (day, week)")
    privacy_cap_epsilon: float | None = Field(
        default=480.0, gt=0, description="ε per (tenant, student) per period; None switches the ledger off"
    )
    privacy_warning_fraction: float = Field(
        default=0.2, ge=0.0, le=1.0, description="responses carry budget_warning when less than this share remains"
    )
    privacy_cap_delta: float = Field(default=1e-4, ge=0, lt=1, description="δ per student per period (Gaussian queries)")
    privacy_accountant: Literal["basic", "rdp", "zcdp"] = "basic"
    privacy_repeat_window_s: float = Field(
        default=3600.0, ge=0, description="an identical request within this window gets the same answer, free"
    )
    allow_unnoised: bool = Field(
        default=False, description="allow epsilon \"none\" (raw answers: unbounded privacy cost, never charged)"
    )
    min_cohort_size: int = Field(default=10, ge=2, description="smallest cohort /v1/cohort-report will describe")
    noise_seed: int | None = Field(default=None, description="tests only: fixed seed for the privacy noise")
