"""Per-item response counts released under student-level DP: the item bank's easiness without DP-SGD's noise.

Why: student-level DP-SGD spreads its noise over every coordinate of the update, and an item bank has two per
item (ASSIST0910: ~34k). A rarely answered item gets noise and almost no signal, so DP training lost what the
non-private warm start gives (docs/results/local-fed-ablation). An item's easiness is a *counting* question, and
counts can be released directly, at two levels in one release:

* each client sums, per bank item and per *item group* (the items requiring the same concepts: their Q-row
  pattern, public), its students' scores and misses (responses minus scores; the responses are released as their
  sum). Every student's contribution is scaled so that each of the two parts has L2 norm 1/√2: one student
  changes the whole release by at most 1 in L2 (the unit DP-SGD clips to).
  Scaling every student to the same norm, rather than clipping only the heavy ones, maximises each coordinate's
  signal-to-noise (with a bound C a student's signal is ``min(1, C / ||v||)`` against noise ``σ·C``; the ratio is
  largest once every student is scaled). The price is a weighting: a student's response weighs ``1 / √(2 r)``
  (``r``: their responses), so light users count more per response than in the non-private start;
* it adds ``N(0, σ²)`` to every coordinate (the Gaussian mechanism, one step, no sampling: charged to the run's
  accountant as ``(σ, q=1, 1 step)`` and composed with the DP-SGD rounds: one guarantee per student);
* the coordinator pools the clients' noisy sums (post-processing). The group level carries the signal on a bank
  whose items are answered by few students each (ASSIST0910: most held-out responses fall on items whose
  per-item sum is below the noise at ε = 2), the item level on a bank whose items are answered by most students
  (FrcSub). :func:`private_warm_start` fits the intercept's feature part to the groups' proportions correct,
  shrinks each group's own toward that fit and each item's toward its group's, each by its estimate's variance
  (noise and binomial) against the per-item prior (an item answered less than the noise, or by few students,
  stays at its group's value). Every other parameter is then trained by DP-SGD with the
  per-item parameters held fixed (``StudentDP.frozen``), so the rounds' noise falls on a few hundred coordinates
  instead of tens of thousands.

Nothing here reads students' data outside :func:`release_item_sums`, and nothing that function returns is
unnoised. The in-process trainer calls it for every shard (:func:`release_for_training`); the Flower engines have
each client call it on its own students and send the result as one message (:mod:`federated.flower.release`), at the
same σ (:func:`release_noise`), pooled and post-processed by the same functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from federated.accountant import PrivacyAccountant, Step, noise_multiplier_for
from federated.data import ResponseTensors
from federated.itembank import ItemBank

__all__ = ["DEFAULT_RELEASE_SHARE", "ItemGroups", "ItemRelease", "ItemSums", "charged", "check_release_share", "pooled", "private_warm_start",
           "release_for_training", "release_events", "release_item_sums", "release_noise", "response_weight"]

DEFAULT_RELEASE_SHARE = 0.9  # of ε, on the release under student-level DP: it led 0.5 in docs/results/dp-training

# The logit of a pooled proportion correct is attenuated against an item's intercept at the mean ability: the
# population's P(correct) averages σ(α θ + c) over θ ~ N(0, 1), ≈ σ(c / sqrt(1 + π/8 α²)) (probit approximation),
# with α = 1 at the start. The per-item parts are held fixed in DP training, so the warm start undoes it once.
_ATTENUATION = math.sqrt(1.0 + math.pi / 8.0)
_HALF = 1.0 / math.sqrt(2.0)  # each level's share of a student's unit norm


@dataclass(frozen=True)
class ItemGroups:
    """The bank's items grouped by the concepts they require (a function of the public Q-matrix only):
    ``of_row[r]`` is bank row ``r``'s group (row 0, outside the bank: its own group), ``patterns`` the groups'
    input rows without the bank index (G, F - 1)."""

    of_row: np.ndarray
    patterns: np.ndarray

    @classmethod
    def of(cls, model: ItemBank, table: np.ndarray) -> ItemGroups:
        k = len(model.concepts)
        rows = np.asarray(table)[:, -1].round().astype(np.int64)
        q_rows = np.asarray(table)[:, :k] > 0
        keys, group = np.unique(q_rows, axis=0, return_inverse=True)
        of_row = np.full(len(model.items) + 1, len(keys), dtype=np.int64)  # unlisted rows: one extra group
        of_row[rows] = group.ravel()
        patterns = np.zeros((len(keys) + 1, np.asarray(table).shape[1] - 1), dtype=np.float32)
        patterns[:len(keys), :k] = keys
        return cls(of_row=of_row, patterns=patterns)

    def __len__(self) -> int:
        return len(self.patterns)


@dataclass(frozen=True)
class ItemSums:
    """Released sums of scores and of responses, per bank row (row 0: outside the bank) and per item group, with
    the standard deviation of the Gaussian noise on the scores and on the misses (pooled over the clients): the
    responses are the scores plus the misses, each noised once (:func:`release_item_sums`)."""

    correct: np.ndarray
    count: np.ndarray
    group_correct: np.ndarray
    group_count: np.ndarray
    noise_sd: float

    def arrays(self) -> list[np.ndarray]:
        """The four released vectors, in field order (what a Flower client sends: ``federated.flower.release``)."""
        return [self.correct, self.count, self.group_correct, self.group_count]

    @classmethod
    def of_arrays(cls, arrays: Sequence[np.ndarray], *, noise_sd: float) -> ItemSums:
        """The sums from :meth:`arrays`' four vectors, carrying ``noise_sd`` (the receiver's, never a sender's claim)."""
        if len(arrays) != 4:
            raise ValueError(f"item sums are four vectors, got {len(arrays)}")
        correct, count, group_correct, group_count = (np.asarray(a, np.float64) for a in arrays)
        if correct.shape != count.shape or group_correct.shape != group_count.shape:
            raise ValueError("item sums: the scores and responses of a level differ in shape")
        return cls(correct, count, group_correct, group_count, float(noise_sd))

    def __add__(self, other: ItemSums) -> ItemSums:
        return ItemSums(self.correct + other.correct, self.count + other.count,
                        self.group_correct + other.group_correct, self.group_count + other.group_count,
                        math.sqrt(self.noise_sd**2 + other.noise_sd**2))


def _scaled_sums(student: np.ndarray, cell: np.ndarray, score: np.ndarray, n_students: int, n_cells: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per cell, the sums of scores and of misses (responses minus scores) with every student's (scores, misses)
    vector over the cells scaled to L2 norm 1/√2. A student answering one item twice contributes (s1 + s2,
    2 - s1 - s2) to its cell: sums per (student, cell) come first.

    Why scores and misses rather than scores and responses: a student's (c, n - c) has norm at most n, where (c, n)
    has at least n (√2 n for a student who is always right), so at the same sensitivity each response carries more
    weight; and the proportion correct c / (c + m) reads the two noises as ``(1 - p) e_c - p e_m`` (variance
    ``σ² ((1 - p)² + p²)``, at most σ²) instead of ``e_c - p e_n`` (``σ² (1 + p²)``). For binary scores on distinct
    items the squared norm is the number of responses ``r``: every response weighs ``1 / √(2 r)``, whatever the
    student's proportion correct (:func:`response_weight`)."""
    unique, inverse = np.unique(student * n_cells + cell, return_inverse=True)
    correct = np.bincount(inverse, weights=score)
    missed = np.bincount(inverse).astype(np.float64) - correct
    owner = unique // n_cells
    norm = np.sqrt(np.bincount(owner, weights=correct**2 + missed**2, minlength=n_students))
    scale = _HALF / norm[owner]  # every owner here has a response with score in [0, 1]: c² + m² >= 1/2 > 0
    cells = unique % n_cells
    return (np.bincount(cells, weights=correct * scale, minlength=n_cells),
            np.bincount(cells, weights=missed * scale, minlength=n_cells))


def release_item_sums(model: ItemBank, data: ResponseTensors, groups: ItemGroups, *, noise_multiplier: float,
                      generator: torch.Generator) -> ItemSums:
    """One client's noisy sums (module docstring): every student scaled to unit norm over both levels, then
    N(0, σ²) on each coordinate, ``σ = noise_multiplier`` (the sensitivity is 1)."""
    if not noise_multiplier > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    size = len(model.items) + 1
    observed = data.observed.numpy()
    rows = data.features[:, -1].round().long()[data.item_index].numpy()[observed]
    student = np.broadcast_to(np.arange(len(data))[:, None], observed.shape)[observed]
    score = data.scores.numpy().astype(np.float64)[observed]
    correct, missed = _scaled_sums(student, rows, score, len(data), size)
    group_correct, group_missed = _scaled_sums(student, groups.of_row[rows], score, len(data), len(groups))

    def noisy(values: np.ndarray) -> np.ndarray:
        return values + torch.randn(len(values), generator=generator, dtype=torch.float64).numpy() * noise_multiplier

    # the released responses are the noisy scores plus the noisy misses (post-processing: the count carries both
    # noises, and _logit_and_variance reads the proportion's noise as the two independent ones)
    released = [noisy(correct), noisy(missed), noisy(group_correct), noisy(group_missed)]
    return ItemSums(released[0], released[0] + released[1], released[2], released[2] + released[3],
                    float(noise_multiplier))


def pooled(releases: Sequence[ItemSums]) -> ItemSums:
    """The coordinator's sum of every client's release (noise variances add)."""
    if not releases:
        raise ValueError("need at least one release")
    total = releases[0]
    for r in releases[1:]:
        total = total + r
    return total


def response_weight(sums: ItemSums, students: int) -> float:
    """The mean weight one response carries at the item level, from public quantities and the release alone.

    A student with ``r`` binary responses to distinct items has item-level norm ``√r`` before scaling (each
    response is a 1 in its item's scores or misses: :func:`_scaled_sums`), so after scaling to 1/√2 each response
    weighs ``w = 1 / √(2 r)`` and ``w² r = 1 / 2``: the same for every student whatever their volume. Summed over
    the training students (their number is public: the manifest's ``train_students``), ``Σ w² r`` over the released
    total ``Σ w r`` is the response-weighted mean weight, which turns scaled counts back into effective responses
    (the binomial variance of a weighted proportion is ``p (1 - p) Σw² / (Σw)²``). Fractional scores and repeated
    items make a norm smaller and weights larger, so this reads fewer effective responses than there are: the
    conservative side."""
    total = float(np.clip(sums.count[1:], 0.0, None).sum())
    if total <= 0 or students <= 0:
        return 1.0
    return float(np.clip(students / 2.0 / total, 1e-6, 1.0))


def _logit_and_variance(correct: np.ndarray, count: np.ndarray, noise_sd: float, mean: float | np.ndarray,
                        prior_weight: float, weight: float) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's logit proportion correct (attenuation undone) and that estimate's variance: the noise's
    ``σ²((1 - p)² + p²)`` (the scores' and the misses' noises, :func:`release_item_sums`) and the binomial
    ``w n p (1 - p)`` (``w``: :func:`response_weight`), over the smoothed count squared, through the logit's
    derivative (the delta method). ``prior_weight`` pseudo-responses (each weighing ``w``) smooth toward ``mean``
    (one proportion, or one per cell: the value the cell is shrunk toward after). The noisy sums are clipped to
    what counts can be (0 <= correct <= count) first: post-processing."""
    n = np.clip(count, 0.0, None)
    c = np.clip(correct, 0.0, n)
    pseudo = prior_weight * weight
    p = np.clip((c + pseudo * mean) / (n + pseudo), 0.02, 0.98)
    variance = (noise_sd**2 * ((1 - p)**2 + p**2) + weight * n * p * (1 - p)) / (n + pseudo) ** 2 / (p * (1 - p)) ** 2
    return np.log(p / (1 - p)) * _ATTENUATION, variance * _ATTENUATION**2


def _shrunk(estimate: np.ndarray, variance: np.ndarray, toward: np.ndarray, prior_sd: float) -> np.ndarray:
    """The posterior mean of a value with prior ``N(toward, prior_sd²)`` given a Gaussian ``estimate``."""
    return toward + prior_sd**2 / (prior_sd**2 + variance) * (estimate - toward)


def private_warm_start(model: ItemBank, table: np.ndarray, groups: ItemGroups, sums: ItemSums, *, students: int,
                       prior_weight: float = 2.0) -> None:
    """Start the bank from noisy pooled sums (module docstring), in three levels, each shrunk toward the one above
    by the per-item prior (``ItemBank.item_prior_sd``) against its estimate's variance (the posterior mean of a
    Gaussian prior and a Gaussian estimate). The intercept's feature part is fitted to the groups' logits by least
    squares on their Q-rows, each weighted by the inverse of its estimate's variance (a unit ridge); each group's
    value is its own logit shrunk toward that fit; each item's is its own logit, smoothed and shrunk toward its
    group's value. An item the noise drowns, or that few students answered, stays at its group's value (not at the
    Q-row fit, nor the bank's mean), a group the noise drowns at the fit. ``students``: how many trained (public).
    Post-processing of ``sums`` only."""
    group_n = np.clip(sums.group_count, 0.0, None)
    if group_n.sum() <= 0:
        return
    mean = float(np.clip(np.clip(sums.group_correct, 0.0, None).sum() / group_n.sum(), 0.02, 0.98))
    # a group-level response weighs less than an item-level one (a student's responses concentrate in few groups,
    # so the group norm is larger): the item level's weight overstates the groups' binomial variance, conservatively
    w = response_weight(sums, students)
    group_logit, group_var = _logit_and_variance(sums.group_correct, sums.group_count, sums.noise_sd, mean,
                                                 prior_weight, w)
    rows = torch.as_tensor(np.asarray(table))
    index = rows[:, -1].round().long()
    prior_sd = model.item_prior_sd
    with torch.no_grad():
        design = torch.cat([torch.as_tensor(groups.patterns).double(),
                            torch.ones(len(groups), 1, dtype=torch.float64)], 1)
        weight = torch.as_tensor(1.0 / group_var)
        gram = design.T @ (weight[:, None] * design) + torch.eye(design.shape[1], dtype=torch.float64)
        solution = torch.linalg.solve(gram, design.T @ (weight * torch.as_tensor(group_logit)))
        model.feature_w[1] = solution[:-1].float()
        model.feature_b[1] = float(solution[-1])
        fit = (design @ solution).numpy()
        group_value = _shrunk(group_logit, group_var, fit, prior_sd)
        base = F.linear(rows[:, :-1], model.feature_w, model.feature_b)[:, 1].double().numpy()
        at = index.numpy()
        toward = group_value[groups.of_row[at]]
        toward_p = 1.0 / (1.0 + np.exp(-toward / _ATTENUATION))  # the group's proportion: the items' pseudo-responses
        own, own_var = _logit_and_variance(sums.correct[at], sums.count[at], sums.noise_sd, toward_p, prior_weight, w)
        inside = index > 0
        delta = _shrunk(own, own_var, toward, prior_sd) - base
        model.item_delta[index[inside], 1] = torch.as_tensor(delta, dtype=torch.float32)[inside]


def charged(events: Iterable[Step]) -> PrivacyAccountant:
    """A new accountant charged ``events`` in order (a release's, then rounds': how a run's guarantee composes)."""
    accountant = PrivacyAccountant()
    for sigma, q, steps in events:
        accountant.step(noise_multiplier=sigma, sample_rate=q, steps=steps)
    return accountant


def release_events(noise_multiplier: float) -> tuple[Step, ...]:
    """What one release of item sums is charged as: one Gaussian step on every student (each belongs to one client's
    release). The rounds after it are calibrated with these as their prior, on either engine."""
    return ((noise_multiplier, 1.0, 1),)


@dataclass(frozen=True)
class ItemRelease:
    """A training run's one release of item sums: its noise, the groups it was summed over and what it released."""

    noise_multiplier: float
    groups: ItemGroups
    sums: ItemSums
    clients: int
    students: int  # training students over every client (public: the manifest's train_students)

    @property
    def events(self) -> tuple[Step, ...]:
        """What it is charged as (:func:`release_events`)."""
        return release_events(self.noise_multiplier)

    def charged(self) -> PrivacyAccountant:
        """A new accountant holding this release: the run's rounds are charged on top of it."""
        return charged(self.events)

    def warm_start(self, model: ItemBank, table: np.ndarray) -> None:
        private_warm_start(model, table, self.groups, self.sums, students=self.students)

    def describe(self) -> dict[str, object]:
        return {"mechanism": "gaussian", "noise_multiplier": self.noise_multiplier, "l2_sensitivity": 1.0,
                "levels": ["item", "item group (Q-row pattern)"], "groups": len(self.groups), "clients": self.clients,
                "pooled_noise_sd": self.sums.noise_sd, "per_item_parameters": "from this release; fixed in DP-SGD"}


def check_release_share(share: float) -> float:
    """``share`` of ε for the item release, checked (``ValueError``): in [0, 1), 0 meaning no release. Every
    configuration that carries one (``TrainingConfig``, ``FlowerConfig``, ``FlowerTraining``) checks it here."""
    if not 0 <= share < 1:
        raise ValueError(f"item_release_share must be in [0, 1), got {share}")
    return share


def release_noise(*, epsilon: float, delta: float) -> float:
    """The noise multiplier at which the release spends ``epsilon`` on its own (one Gaussian step, no sampling);
    every engine's release is made at it, and the rounds after are calibrated on top (``prior``)."""
    return noise_multiplier_for(target_epsilon=epsilon, delta=delta, sample_rate=1.0, steps=1)


def release_for_training(model: ItemBank, shards: Sequence[ResponseTensors], *, table: np.ndarray, epsilon: float,
                         delta: float, seed: int) -> ItemRelease:
    """Every client's release at the noise that spends ``epsilon`` on its own (composed with the rounds after)."""
    sigma = release_noise(epsilon=epsilon, delta=delta)
    groups = ItemGroups.of(model, table)
    generator = torch.Generator().manual_seed(seed)
    sums = pooled([release_item_sums(model, shard, groups, noise_multiplier=sigma, generator=generator)
                   for shard in shards])
    return ItemRelease(noise_multiplier=sigma, groups=groups, sums=sums, clients=len(shards),
                       students=sum(len(shard) for shard in shards))
