"""The posterior on a grid of [0, 1]: density, and vectorized summaries (mean, median, credible interval, sd)."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from diagnosis.posterior.model import ReportModel
from diagnosis.posterior.priors import UNIFORM_PRIOR, BetaPrior
from privacy.likelihood import MATCH_TOL, DegeneratePosteriorError

Estimate = Literal["mean", "median"]

DEFAULT_GRID_SIZE = 1001
DEFAULT_LEVEL = 0.9
MAX_GRID_SIZE = 100_001
_CELLS_PER_SCALE = 40
_ROW_BUDGET = 2_000_000  # rows × cells evaluated at once


# --------------------------------------------------------------------------------------------
# Posterior on a grid
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PosteriorSummary:
    """Posterior mean, median, equal-tailed credible interval [lower, upper] at ``level``, and sd."""

    mean: float
    median: float
    lower: float
    upper: float
    sd: float
    level: float = DEFAULT_LEVEL

    @property
    def interval(self) -> tuple[float, float]:
        return self.lower, self.upper

    def estimate(self, kind: Estimate = "mean") -> float:
        if kind == "mean":
            return self.mean
        if kind == "median":
            return self.median
        raise ValueError(f"estimate must be 'mean' or 'median', got {kind!r}")


@dataclass(frozen=True)
class PosteriorSummaries:
    """:class:`PosteriorSummary` fields as arrays, one entry per row of a report matrix."""

    mean: np.ndarray
    median: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    sd: np.ndarray
    level: float = DEFAULT_LEVEL

    def __len__(self) -> int:
        return int(self.mean.size)

    def __getitem__(self, i: int) -> PosteriorSummary:
        return PosteriorSummary(
            float(self.mean[i]),
            float(self.median[i]),
            float(self.lower[i]),
            float(self.upper[i]),
            float(self.sd[i]),
            self.level,
        )


def check_level(level: float) -> None:
    """A credible level must lie in (0, 1) (checked by every entry point that takes one)."""
    if isinstance(level, bool) or not (isinstance(level, int | float) and 0 < level < 1):
        raise ValueError(f"level must lie in (0, 1), got {level!r}")


def _grid_cells(models: Sequence[ReportModel], grid_size: int) -> int:
    if isinstance(grid_size, bool) or not isinstance(grid_size, int) or grid_size < 2:
        raise ValueError(f"grid_size must be an integer >= 2, got {grid_size!r}")
    scales = [m.kernel.scale for m in models if not m.noiseless]
    finest = min(scales, default=math.inf)
    if finest <= 0 or not math.isfinite(finest):
        return grid_size
    return int(min(MAX_GRID_SIZE, max(grid_size, math.ceil(_CELLS_PER_SCALE / finest))))


def _as_matrix(reports: np.ndarray | Sequence[Sequence[float]], n_models: int) -> np.ndarray:
    r = np.asarray(reports, dtype=np.float64)
    if r.ndim == 1 and n_models == 1:
        r = r[:, None]
    if r.ndim != 2 or r.shape[1] != n_models:
        raise ValueError(f"reports must have shape (n, {n_models}), got {r.shape}")
    if np.any(np.isinf(r)):
        raise ValueError("reports must be finite (NaN marks a missing report)")
    return r


def _exact_values(r: np.ndarray, models: Sequence[ReportModel]) -> np.ndarray:
    """Per row, the common value of its noiseless reports (NaN when it has none)."""
    cols = [j for j, m in enumerate(models) if m.noiseless]
    out = np.full(r.shape[0], np.nan)
    if not cols:
        return out
    sub = r[:, cols]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: no noiseless report there
        lo, hi = np.nanmin(sub, axis=1), np.nanmax(sub, axis=1)
    has = ~np.isnan(lo)
    disagree = has & (hi - lo > MATCH_TOL)
    if np.any(disagree):
        i = int(np.flatnonzero(disagree)[0])
        raise DegeneratePosteriorError(
            f"noiseless reports disagree ({lo[i]!r} vs {hi[i]!r}): impossible without entity error; "
            "give those entities an entity_error_sd > 0"
        )
    out[has] = lo[has]
    return out


@functools.lru_cache(maxsize=1024)
def _prior_log_masses(a: float, b: float, cells: int) -> np.ndarray:
    """A prior's log cell masses on a ``cells`` grid (cached: a diagnosis reuses a handful of priors)."""
    masses = BetaPrior(a, b).cell_log_masses(np.linspace(0.0, 1.0, cells + 1))
    masses.setflags(write=False)
    return masses


def _log_weights(
    r: np.ndarray, models: Sequence[ReportModel], prior: BetaPrior | Sequence[BetaPrior], cells: int
) -> np.ndarray:
    """Unnormalized log posterior cell weights, shape (n, cells); noiseless columns are skipped.

    ``prior``: one for every row, or one per row (a diagnosis puts its concepts in the rows).
    """
    centres = (np.arange(cells) + 0.5) / cells
    if isinstance(prior, BetaPrior):
        out = np.broadcast_to(_prior_log_masses(prior.a, prior.b, cells), (r.shape[0], cells)).copy()
    else:
        out = np.stack([_prior_log_masses(p.a, p.b, cells) for p in prior]) if len(prior) else np.zeros((0, cells))
    for j, model in enumerate(models):
        if model.noiseless:
            continue
        present = ~np.isnan(r[:, j])
        if np.any(present):
            out[present] += model.log_likelihood(r[present, j], centres)
    return out


@functools.lru_cache(maxsize=64)
def _centres(cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The cell centres of a ``cells`` grid and their squares (cached, read-only: every diagnosis reuses them)."""
    h = 1.0 / cells
    centres = (np.arange(cells) + 0.5) * h
    squares = centres**2
    centres.setflags(write=False)
    squares.setflags(write=False)
    return centres, squares


def _summarize(logw: np.ndarray, level: float) -> tuple[np.ndarray, ...]:
    n, cells = logw.shape
    h = 1.0 / cells
    top = np.max(logw, axis=1, keepdims=True)
    if not np.isfinite(top).all():
        raise DegeneratePosteriorError("the reports have zero likelihood everywhere under the model and prior")
    w = np.exp(logw - top)
    w /= w.sum(axis=1, keepdims=True)
    centres, squares = _centres(cells)
    mean = w @ centres
    var = w @ squares - mean**2 + h * h / 12
    cum = np.cumsum(w, axis=1)
    cum[:, -1] = 1.0
    # The three quantiles (median, the interval's ends) at once, column by column as one quantile each would be: the
    # same element-wise arithmetic, a third of the small-array calls (a diagnosis's few rows make the calls the cost).
    tail = (1 - level) / 2
    q = np.array([0.5, tail, 1 - tail])
    rows = np.arange(n)[:, None]
    # how many cells lie below each q, per row: cum is non-decreasing but for its last cell (set to 1 > q), so those
    # cells are a prefix and a binary search counts them exactly as a comparison over the row would
    i = np.minimum(np.stack([np.searchsorted(row, q) for row in cum]) if n else np.zeros((0, 3), int), cells - 1)
    below = np.where(i > 0, cum[rows, np.maximum(i - 1, 0)], 0.0)
    wi = w[rows, i]
    frac = np.where(wi > 0, (q - below) / np.where(wi > 0, wi, 1.0), 0.5)
    quantiles = (i + np.clip(frac, 0.0, 1.0)) * h
    return (
        np.clip(mean, 0.0, 1.0),
        quantiles[:, 0],
        quantiles[:, 1],
        quantiles[:, 2],
        np.sqrt(np.maximum(var, 0.0)),
    )


def posterior_summaries(
    reports: np.ndarray | Sequence[Sequence[float]],
    models: Sequence[ReportModel],
    prior: BetaPrior | Sequence[BetaPrior] = UNIFORM_PRIOR,
    *,
    level: float = DEFAULT_LEVEL,
    grid_size: int = DEFAULT_GRID_SIZE,
    extra_log_likelihood: Callable[[np.ndarray], np.ndarray] | None = None,
) -> PosteriorSummaries:
    """Posterior summaries for n independent problems sharing the entities' models.

    ``reports`` has shape (n, len(models)): row i holds problem i's report from each entity (NaN
    where an entity did not answer) — students of one concept in an evaluation, or the concepts of
    one diagnosis. ``prior``: shared, or one per row. Vectorized over rows. ``extra_log_likelihood``:
    cell centres -> (n, cells) log factors added to every row (the entities' own uncertainty,
    :mod:`diagnosis.posterior.spread`); rows with a noiseless report ignore it, as they ignore the other factors.
    """
    check_level(level)
    models = list(models)
    r = _as_matrix(reports, len(models))
    if not isinstance(prior, BetaPrior) and len(prior) != r.shape[0]:
        raise ValueError(f"one prior per row: got {len(prior)} priors for {r.shape[0]} rows")
    for j, model in enumerate(models):
        col = r[:, j]
        present = col[~np.isnan(col)]
        if present.size:
            model.kernel.check(present)
    exact = _exact_values(r, models)
    cells = _grid_cells(models, grid_size)
    n = r.shape[0]
    parts: list[tuple[np.ndarray, ...]] = []
    step = max(1, _ROW_BUDGET // cells)
    extra = None
    if extra_log_likelihood is not None:
        extra = extra_log_likelihood((np.arange(cells) + 0.5) / cells)
        if extra.shape != (n, cells):
            raise ValueError(f"extra_log_likelihood must return shape {(n, cells)}, got {extra.shape}")
    for start in range(0, n, step):
        rows = prior if isinstance(prior, BetaPrior) else prior[start : start + step]
        logw = _log_weights(r[start : start + step], models, rows, cells)
        if extra is not None:
            logw = logw + extra[start : start + step]
        parts.append(_summarize(logw, level))
    if parts:
        mean, median, lower, upper, sd = (np.concatenate(p) for p in zip(*parts))
    else:
        mean = median = lower = upper = sd = np.empty(0)
    has = ~np.isnan(exact)
    for arr in (mean, median, lower, upper):
        arr[has] = exact[has]
    sd[has] = 0.0
    return PosteriorSummaries(mean, median, lower, upper, sd, float(level))


def _split(reports: Sequence[tuple[float, ReportModel]]) -> tuple[np.ndarray, list[ReportModel]]:
    values, models = [], []
    for item in reports:
        value, model = item
        if not isinstance(model, ReportModel):
            raise TypeError(f"each report must be (value, ReportModel), got {item!r}")
        values.append(float(value))
        models.append(model)
    r = np.asarray(values, dtype=np.float64).reshape(1, len(values))
    if not np.all(np.isfinite(r)):
        raise ValueError("reports must be finite")
    return r, models


def posterior_summary(
    reports: Sequence[tuple[float, ReportModel]],
    prior: BetaPrior = UNIFORM_PRIOR,
    *,
    level: float = DEFAULT_LEVEL,
    grid_size: int = DEFAULT_GRID_SIZE,
) -> PosteriorSummary:
    """The posterior of one concept's mastery from ``(report, model)`` pairs (no reports: the prior)."""
    check_level(level)
    r, models = _split(reports)
    return posterior_summaries(r, models, prior, level=level, grid_size=grid_size)[0]


def posterior_grid(
    reports: Sequence[tuple[float, ReportModel]],
    prior: BetaPrior = UNIFORM_PRIOR,
    grid_size: int = DEFAULT_GRID_SIZE,
) -> tuple[np.ndarray, np.ndarray]:
    """(cell centres, posterior density at them) with Σ density·h = 1, h = 1/len(grid).

    The cell count is ``grid_size`` or more (see the :mod:`diagnosis.posterior` docstring). A
    noiseless report (no noise, τ = 0) makes the posterior a point mass: all of it lands in the
    cell holding it.
    """
    r, models = _split(reports)
    for j, model in enumerate(models):
        model.kernel.check(r[:, j])
    exact = _exact_values(r, models)[0]
    cells = _grid_cells(models, grid_size)
    h = 1.0 / cells
    centres = (np.arange(cells) + 0.5) * h
    if not math.isnan(exact):
        density = np.zeros(cells)
        density[min(int(exact * cells), cells - 1)] = cells
        return centres, density
    logw = _log_weights(r, models, prior, cells)[0]
    top = float(np.max(logw))
    if not math.isfinite(top):
        raise DegeneratePosteriorError("the reports have zero likelihood everywhere under the model and prior")
    w = np.exp(logw - top)
    return centres, w / (w.sum() * h)
