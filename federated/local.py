"""Local training on one client's students: plain, or student-level DP-SGD.

Both use the masked-response objective: each step hides ~20% of each student's responses,
encodes the rest and is scored (BCE) on the hidden ones, so the model learns exactly what it
is used for at inference, diagnosing from responses it was given.

Student-level DP-SGD treats one *student* (all their responses) as the unit of privacy: per
step, students are Poisson-sampled with rate q, each student's gradient is clipped to L2
norm C, the clipped sum gets N(0, (sigma C)^2) noise, and it is divided by the *expected*
batch size q n (a fixed denominator, so the batch size itself is not released). Per-student
gradients come from ``torch.func`` (functional_call + vmap + grad), which needs no Opacus
hooks and works on any functional model. The FedProx proximal gradient mu (w - w_global)
depends on no student's data, so it is added *after* clipping and noise and costs no privacy.

The returned ``loss`` and ``pre_clip_norms`` are computed from the client's data and are not
privatised: they are for logging in simulation, not for release.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from federated.data import ResponseTensors, hidden_mask
from federated.model import CDModel, masked_bce

__all__ = [
    "LocalConfig",
    "LocalResult",
    "StudentDP",
    "add_update",
    "clipped_grad_sum",
    "get_parameters",
    "set_parameters",
    "train_local",
]


@dataclass(frozen=True)
class LocalConfig:
    """Plain local training: ``epochs`` passes in minibatches (DP-SGD uses ``StudentDP.steps`` instead)."""

    epochs: int = 1
    batch_size: int = 32
    lr: float = 1e-2
    optimizer: Literal["adam", "sgd"] = "adam"
    mask_frac: float = 0.2
    prox_mu: float = 0.0

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.batch_size < 1 or not self.lr > 0 or self.prox_mu < 0:
            raise ValueError(f"invalid LocalConfig: {self}")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")


@dataclass(frozen=True)
class StudentDP:
    """Student-level DP-SGD: ``steps`` steps, each on a Poisson(``sample_rate``) sample of students."""

    noise_multiplier: float
    clip_norm: float
    sample_rate: float
    steps: int
    # parameters DP-SGD leaves as they are (no gradient, no noise): the per-item ones when their values come from
    # a separate accounted release (federated.item_release), so the noise falls on fewer coordinates
    frozen: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.noise_multiplier < 0 or not self.clip_norm > 0 or not 0 < self.sample_rate <= 1 or self.steps < 0:
            raise ValueError(f"invalid StudentDP: {self}")


@dataclass
class LocalResult:
    update: list[np.ndarray]  # new - old, in model.parameters() order
    loss: float  # mean masked BCE over this client's training steps
    n_students: int
    steps: int
    pre_clip_norms: list[float] = field(default_factory=list)  # per-student gradient norms (DP-SGD only)
    # parameter index -> per-row weights (responses per item) for parameters averaged row by row;
    # not privatised, so aggregation uses them only without DP
    row_weights: dict[int, np.ndarray] = field(default_factory=dict)


def get_parameters(model: torch.nn.Module) -> list[np.ndarray]:
    """Parameters as numpy arrays (copies), in ``model.parameters()`` order: the wire format."""
    return [p.detach().cpu().numpy().copy() for p in model.parameters()]


def set_parameters(model: torch.nn.Module, arrays: Sequence[np.ndarray]) -> None:
    params = list(model.parameters())
    if len(params) != len(arrays):
        raise ValueError(f"model has {len(params)} parameter tensors, got {len(arrays)} arrays")
    with torch.no_grad():
        for p, a in zip(params, arrays, strict=True):
            if tuple(p.shape) != tuple(np.shape(a)):
                raise ValueError(f"shape mismatch: parameter {tuple(p.shape)} vs array {np.shape(a)}")
            p.copy_(torch.as_tensor(np.asarray(a), dtype=p.dtype))


def add_update(model: torch.nn.Module, update: Sequence[np.ndarray], *, scale: float = 1.0) -> None:
    """w <- w + scale * update (the server step of FedAvg)."""
    with torch.no_grad():
        for p, u in zip(model.parameters(), update, strict=True):
            p.add_(torch.as_tensor(np.asarray(u), dtype=p.dtype, device=p.device), alpha=scale)


def clipped_grad_sum(
    loss_fn: Callable[..., torch.Tensor],
    params: dict[str, torch.Tensor],
    examples: Sequence[torch.Tensor],
    *,
    clip_norm: float,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Sum over examples of each example's gradient clipped to L2 norm ``clip_norm``.

    ``loss_fn(params, *example)`` is the loss of ONE example (tensors without the batch
    dimension); ``examples`` are batched along dim 0. Returns the clipped sum per parameter
    and the pre-clip per-example norms (over all parameters together).
    """
    per_example = vmap(grad(loss_fn), in_dims=(None, *[0] * len(examples)))(params, *examples)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_example.values()))
    factor = (clip_norm / (norms + 1e-12)).clamp(max=1.0)
    summed = {name: torch.einsum("b,b...->...", factor, g) for name, g in per_example.items()}
    return summed, norms


def _optimizer(model: torch.nn.Module, config: LocalConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=config.lr)
    return torch.optim.SGD(model.parameters(), lr=config.lr)


def _prox(model: torch.nn.Module, anchor: list[torch.Tensor]) -> torch.Tensor:
    return sum((p - a).pow(2).sum() for p, a in zip(model.parameters(), anchor, strict=True))


def _train_plain(model: CDModel, data: ResponseTensors, config: LocalConfig, generator: torch.Generator,
                 anchor: list[torch.Tensor]) -> tuple[list[float], int]:
    device = anchor[0].device
    optimizer, losses, steps = _optimizer(model, config), [], 0
    for _ in range(config.epochs):
        order = torch.randperm(len(data), generator=generator)
        for start in range(0, len(data), config.batch_size):
            feats, scores, observed = (t.to(device) for t in data.batch(order[start:start + config.batch_size]))
            target = hidden_mask(observed.cpu(), frac=config.mask_frac, generator=generator).to(device)
            per_student = masked_bce(model(feats, scores, observed & ~target), scores, target)
            has = target.any(1)
            if not has.any():
                continue
            loss = per_student[has].mean()
            total = loss + model.penalty() / len(data)
            if config.prox_mu:
                total = total + 0.5 * config.prox_mu * _prox(model, anchor)
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
            losses.append(loss.item())
            steps += 1
    return losses, steps


def _train_dp(model: CDModel, data: ResponseTensors, config: LocalConfig, dp: StudentDP, generator: torch.Generator,
              anchor: list[torch.Tensor]) -> tuple[list[float], list[float]]:
    device = anchor[0].device
    names = [name for name, _ in model.named_parameters()]
    unknown = set(dp.frozen) - set(names)
    if unknown:
        raise ValueError(f"StudentDP.frozen names parameters the model lacks: {', '.join(sorted(unknown))}")

    def loss_one(params: dict[str, torch.Tensor], feats: torch.Tensor, scores: torch.Tensor,
                 context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        proba = functional_call(model, params, (feats[None], scores[None], context[None]))
        return masked_bce(proba, scores[None], target[None])[0]

    optimizer, losses, norms = _optimizer(model, config), [], []
    denominator = dp.sample_rate * len(data)
    for _ in range(dp.steps):
        chosen = torch.nonzero(torch.rand(len(data), generator=generator) < dp.sample_rate).flatten()
        # frozen parameters stay the module's own in functional_call: no per-student gradient, no noise
        params = {name: p.detach() for name, p in model.named_parameters() if name not in dp.frozen}
        summed = {name: torch.zeros_like(p) for name, p in params.items()}
        if len(chosen):
            feats, scores, observed = (t.to(device) for t in data.batch(chosen))
            target = hidden_mask(observed.cpu(), frac=config.mask_frac, generator=generator).to(device)
            summed, batch_norms = clipped_grad_sum(loss_one, params, (feats, scores, observed & ~target, target),
                                                   clip_norm=dp.clip_norm)
            norms.extend(batch_norms.tolist())
            with torch.no_grad():
                per_student = masked_bce(model(feats, scores, observed & ~target), scores, target)
            losses.append(float(per_student[target.any(1)].mean()) if target.any() else float("nan"))
        # the prior on item parameters reads no student's data: its gradient joins after the noise, free
        penalty = model.penalty() / len(data)
        prior = torch.autograd.grad(penalty, list(model.parameters()), allow_unused=True, materialize_grads=True) \
            if penalty.requires_grad else [torch.zeros_like(p) for p in model.parameters()]
        optimizer.zero_grad()
        for name, p, g_prior in zip(names, model.parameters(), prior, strict=True):
            if name in dp.frozen:
                p.grad = None  # the optimiser skips it
                continue
            noise = torch.randn(p.shape, generator=generator).to(device) * (dp.noise_multiplier * dp.clip_norm)
            p.grad = (summed[name] + noise) / denominator + g_prior
            if config.prox_mu:
                p.grad += config.prox_mu * (p.detach() - anchor[names.index(name)])
        optimizer.step()
    return losses, norms


def train_local(
    model: CDModel,
    data: ResponseTensors,
    *,
    config: LocalConfig,
    generator: torch.Generator,
    dp: StudentDP | None = None,
) -> LocalResult:
    """Train ``model`` in place on ``data``; return the update (new - old) and metrics.

    The starting weights double as the FedProx anchor. Items these students answered are
    marked seen on the model.
    """
    anchor = [p.detach().clone() for p in model.parameters()]
    before = get_parameters(model)
    model.train()
    if dp is None:
        losses, steps = _train_plain(model, data, config, generator, anchor)
        norms: list[float] = []
    else:
        losses, norms = _train_dp(model, data, config, dp, generator, anchor)
        steps = dp.steps
    model.mark_seen(data.answered_items())
    update = [after - b for after, b in zip(get_parameters(model), before, strict=True)]
    finite = [x for x in losses if x == x]
    position = {name: i for i, (name, _) in enumerate(model.named_parameters())}
    weights = model.item_weights(data.features, data.item_index, data.observed)
    return LocalResult(update=update, loss=float(np.mean(finite)) if finite else float("nan"),
                       n_students=len(data), steps=steps, pre_clip_norms=norms,
                       row_weights={position[name]: w for name, w in weights.items()})
