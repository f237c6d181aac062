"""The noise level a diagnosis is released at, and whether it matches the one its calibration was fitted at.

A calibration is fitted on validation answers privatized at one noise level (mechanism, ε,
sensitivity mode). Applied to answers released at another level its
weights and residuals describe the wrong noise, so a diagnosis says when that happens
(:func:`calibration_mismatch`) instead of silently serving a calibration fitted for other data.
"""

from __future__ import annotations

from dataclasses import dataclass

from privacy import DEFAULT_DELTA, Mechanism, NoNoise, mechanism_kind, requested_name

__all__ = ["NO_NOISE_LEVEL", "CalibrationTag", "NoiseLevel", "calibration_mismatch"]


@dataclass(frozen=True, kw_only=True)
class NoiseLevel:
    """How each entity's answer is privatized: ``epsilon`` None means no noise (then nothing else matters).

    ``mechanism`` is the registry's mechanism kind (a :class:`privacy.Mechanism` subclass). A name (a request's, a
    setting's, a stored calibration record's) is read into its kind here, through the registry, once;
    :attr:`mechanism_name` is the name again, where a level is written out.
    """

    mechanism: type[Mechanism] = NoNoise
    epsilon: float | None = None
    sensitivity: str = "paper"
    delta: float = DEFAULT_DELTA

    def __post_init__(self) -> None:
        if isinstance(self.mechanism, str):  # a name, at the edge: the registry's kind from here on
            object.__setattr__(self, "mechanism", mechanism_kind(self.mechanism))
        if not (isinstance(self.mechanism, type) and issubclass(self.mechanism, Mechanism)):
            raise TypeError(f"mechanism must be a privacy.Mechanism kind, got {self.mechanism!r}")
        if self.epsilon is not None and not self.epsilon > 0:
            raise ValueError(f"epsilon must be > 0 or None (no noise), got {self.epsilon}")

    @property
    def noiseless(self) -> bool:
        return self.epsilon is None

    @property
    def mechanism_name(self) -> str:
        """The name a request asks for the mechanism by (``"none"`` when it is no noise): what records store."""
        return NoNoise.name if self.noiseless or self.mechanism is NoNoise else requested_name(self.mechanism)

    def fields(self) -> dict[str, object]:
        """The fields that set how noisy the released answers are. δ is left out: it only moves the
        Gaussian's σ slightly, and a δ sent with another mechanism is ignored by it."""
        if self.noiseless:
            return {"mechanism": self.mechanism_name, "epsilon": None}
        return {"mechanism": self.mechanism_name, "epsilon": self.epsilon, "sensitivity": self.sensitivity}


NO_NOISE_LEVEL = NoiseLevel()


@dataclass(frozen=True, kw_only=True)
class CalibrationTag:
    """Which calibration an aggregator applies, the noise level it was fitted for, and on what: ``n_students``
    validation students whose truth came from ``truth_source`` (a diagnosis's ``basis`` reports both)."""

    id: str
    noise: NoiseLevel
    n_students: int = 0
    truth_source: str = ""


def calibration_mismatch(calibrated: NoiseLevel, served: NoiseLevel) -> dict[str, dict[str, object]] | None:
    """None when ``served`` releases answers as ``calibrated`` assumed; otherwise each differing field,
    ``{field: {"calibrated": value, "served": value}}`` (a pure function: the pipeline and app call it)."""
    fitted, used = calibrated.fields(), served.fields()
    differ = {
        name: {"calibrated": fitted.get(name), "served": used.get(name)}
        for name in dict.fromkeys([*fitted, *used])
        if fitted.get(name) != used.get(name)
    }
    return differ or None
