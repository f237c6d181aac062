"""Adaptive item selection for authenticated tenants (``/v1/next-items``): the Q-matrix the tenant may use (the
planner's, as a diagnosis resolves it), the model serving it (``local-fed``'s, else the untrained evidence model), its
item bank read once per model and Q-matrix version, then :mod:`diagnosis.next_items` on the student's responses.

**Privacy.** Nothing here asks an entity, writes a row or charges the ledger: the responses come from the platform
that sends them, the posterior is computed in this process by the model the platform's own data trained, and only item
ids and that platform's own student's intervals go back to it. Nothing leaves the gateway, so no ε is spent
(docs/next-items.md says why that is sound; tests/app/routes/test_next_items.py checks that no entity is called and the
ledger is untouched).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from app.auth import Principal
from app.domain_errors import InvalidInput, Unavailable
from app.limits import check_responses
from app.schemas.next_items import (
    DEFAULT_MIN_GAIN,
    BatchNextItemsRequest,
    BatchNextItemsResponse,
    ConceptInformed,
    ConceptStatus,
    NextItem,
    NextItemsOptions,
    NextItemsRequest,
    NextItemsResponse,
)
from app.services.planning import Planner
from app.services.report import StudentReport, SuggestedItem
from app.settings import Settings
from diagnosis.next_items import SelectionRule, concept_states, posterior, posterior_from_intervals, select
from providers.item_response import items_to_forecast
from providers.serving_bank import ServingBank, serving_bank
from qmatrix import QMatrix, Response

if TYPE_CHECKING:
    from federated.registry import LoadedModel

__all__ = ["REPORT_SUGGESTIONS", "NextItemsService", "with_next_items"]

log = logging.getLogger("fedcd.next_items")

REPORT_SUGGESTIONS = 3  # items the student report suggests for its thin-evidence concepts
_BANKS = 16  # (model, Q-matrix version) banks kept; ASSIST0910's is ~10 MB
_LISTED = 20


class NextItemsService:
    """``local_fed``: the federation's ``local-fed`` entity (anything with ``serving_model``), None without one."""

    def __init__(self, *, planner: Planner, local_fed: Any | None, settings: Settings) -> None:
        self.planner, self.local_fed, self.settings = planner, local_fed, settings
        self._banks: OrderedDict[tuple[object, ...], ServingBank] = OrderedDict()
        self._lock = threading.Lock()

    async def next_items(self, body: NextItemsRequest, principal: Principal) -> NextItemsResponse:
        q, key = await self._qmatrix(body, principal)
        check_responses(q, body.responses, self.settings, ())
        targets, exclude = _checked_options(body, q)
        return await asyncio.to_thread(self._one, q, key, principal.tenant, body, body.student_id, body.responses,
                                       targets, exclude)

    async def next_items_batch(self, body: BatchNextItemsRequest, principal: Principal) -> BatchNextItemsResponse:
        if len(body.students) > self.settings.max_batch_size:
            raise InvalidInput(("students",), [f"at most {self.settings.max_batch_size} students per batch"])
        q, key = await self._qmatrix(body, principal)
        for n, student in enumerate(body.students):
            check_responses(q, student.responses, self.settings, ("students", n))
        targets, exclude = _checked_options(body, q)

        def run() -> list[NextItemsResponse]:
            return [self._one(q, key, principal.tenant, body, s.student_id, s.responses, targets, exclude)
                    for s in body.students]

        results = await asyncio.to_thread(run)
        return BatchNextItemsResponse(results=results, count=len(results))  # every check ran before any student

    async def _qmatrix(self, options: NextItemsOptions, principal: Principal) -> tuple[QMatrix, str]:
        config = await self.planner.configuration(principal, qmatrix_id=options.qmatrix_id)  # NotFound: unknown id
        return config.resolved.qmatrix, config.resolved.key

    def bank(self, q: QMatrix, key: str, tenant: str) -> ServingBank:
        """The serving model's bank of ``q``, read once per (model, Q-matrix version) (blocking). ``key`` names the
        Q-matrix's exact rows (its id and version)."""
        from federated.registry import RegistryError  # torch: only once a selection is asked for

        concepts = tuple(q.concepts)
        try:
            loaded = (self.local_fed.serving_model(q.id, tenant, concepts) if self.local_fed is not None
                      else _untrained(concepts))
        except RegistryError as exc:  # the active model failed verification: never replaced silently
            raise Unavailable(("qmatrix_id",), [f"the model serving Q-matrix '{q.id}' is not usable: {exc}"]) from exc
        cache_key = (*_model_identity(loaded), key)
        with self._lock:
            found = self._banks.get(cache_key)
            if found is not None:
                self._banks.move_to_end(cache_key)
                return found
        built = serving_bank(loaded, items_to_forecast(q), untrained=_untrained(concepts))
        with self._lock:
            self._banks[cache_key] = built
            while len(self._banks) > _BANKS:
                self._banks.popitem(last=False)
        return built

    def suggest_for_report(self, report: StudentReport, q: QMatrix, tenant: str) -> StudentReport:
        """``report`` with the items to ask next for its thin-evidence concepts (blocking). The report has the released
        diagnosis, not the responses: the posterior is read off its intervals (``posterior_from_intervals``), and the
        items the student already answered are not known to it (a platform asks ``/v1/next-items`` with them)."""
        thin = [c for c in report.concepts if c.thin and c.low is not None and c.high is not None]
        if not thin:
            return report
        bank = self.bank(q, f"report:{q.id}:{hash((q.concepts, q.items))}", tenant)
        beliefs = {c.concept: (c.mastery, c.low, c.high) for c in report.concepts
                   if c.low is not None and c.high is not None}
        post = posterior_from_intervals(bank, beliefs, level=thin[0].level)  # type: ignore[arg-type]
        chosen = select(bank, post, candidates=np.arange(len(bank.item_ids)), targets=[c.concept for c in thin],
                        count=REPORT_SUGGESTIONS, rule=SelectionRule(min_gain=DEFAULT_MIN_GAIN, level=thin[0].level))
        items = [SuggestedItem(item_id=bank.item_ids[p.position], informs=tuple(c for c, *_ in p.informs))
                 for p in chosen.picks]
        return dataclasses.replace(report, next_items=items)

    def _one(self, q: QMatrix, key: str, tenant: str, options: NextItemsOptions, student_id: str,
             responses: Sequence[Response], targets: list[str], exclude: set[str]) -> NextItemsResponse:
        bank = self.bank(q, key, tenant)
        positions = [int(p) for p in bank.positions([r.item_id for r in responses])]
        post = posterior(bank, positions, [r.score for r in responses])
        open_items = np.ones(len(bank.item_ids), dtype=bool)
        open_items[positions] = False  # answered items are never suggested again
        open_items[bank.positions(sorted(exclude))] = False
        candidates = np.flatnonzero(open_items)
        rule = SelectionRule(target_width=options.target_width, randomesque=options.randomesque,
                             min_gain=options.min_gain)
        chosen = select(bank, post, candidates=candidates, targets=targets, count=options.count, rule=rule,
                        rng=np.random.default_rng(_seed(tenant, student_id, responses)))
        wanted, modelled = set(targets), set(bank.concepts)
        concepts = [ConceptStatus(concept=s.concept, mastery=s.mastery, interval=s.interval, width=s.width,
                                  targeted=s.concept in wanted,
                                  open=s.concept in wanted and (options.target_width is None
                                                                or s.width > options.target_width))
                    for s in concept_states(bank, post)]
        items = [NextItem(item_id=bank.item_ids[p.position], rank=n + 1, expected_gain=p.gain,
                          expected_narrowing=p.narrowing, p_correct=p.p_correct,
                          concepts=list(bank.item_concepts[p.position]),
                          informs=[ConceptInformed(concept=c, entropy_reduction=e, width_now=w0, width_after=w1)
                                   for c, e, w0, w1 in p.informs])
                 for n, p in enumerate(chosen.picks)]
        return NextItemsResponse(
            student_id=student_id, qmatrix_id=q.id, model=bank.model, basis="trained" if bank.trained else "untrained",
            items=items, stop=chosen.stop_reason is not None, stop_reason=chosen.stop_reason,  # type: ignore[arg-type]
            concepts=concepts, not_modelled=[c for c in q.concepts if c not in modelled],
        )


def _model_identity(loaded: LoadedModel) -> tuple[object, ...]:
    """What names the model a bank was read from, as the registry describes it: its registry key (whose model: the
    operator's or a tenant's, of which Q-matrix), version and signed weights digest (a registry rebuilt in the same
    folder numbers its versions from v0001 again). Never the object's ``id``: ids are reused once a replaced model
    is collected, and the reload that replaced it would then be served the old model's bank. The untrained evidence
    model has no registry entry; it is named by its concepts."""
    from federated.registry import model_key

    manifest = loaded.manifest
    if manifest.get("untrained"):
        return (loaded.version, tuple(loaded.model.concepts))
    return (model_key(str(manifest.get("qmatrix_id")), manifest.get("tenant") or None), loaded.version,
            (manifest.get("weights") or {}).get("sha256"))


@functools.lru_cache(maxsize=_BANKS)
def _untrained(concepts: tuple[str, ...]) -> LoadedModel:
    """The untrained evidence model over ``concepts``, built once (a torch module: not per request)."""
    from providers.local_fed import untrained_model  # torch: only once a selection is asked for

    return untrained_model(concepts)


def with_next_items(
    service: NextItemsService | None, report: StudentReport, q: QMatrix | None, tenant: str
) -> StudentReport:
    """``report`` with its suggested next items (blocking); unchanged without the Q-matrix, before the gateway
    started (no ``service``) or when the suggestion fails (the report still reads: a suggestion is an extra, logged
    when it cannot be made)."""
    if q is None or service is None:
        return report
    try:
        return service.suggest_for_report(report, q, tenant)
    except Exception:
        log.exception("the student report's next items could not be chosen")
        return report


def _checked_options(options: NextItemsOptions, q: QMatrix) -> tuple[list[str], set[str]]:
    """(targeted concepts, excluded items); ``InvalidInput`` naming the field for a concept or item the Q-matrix
    lacks."""
    targets = list(dict.fromkeys(options.target_concepts)) if options.target_concepts else list(q.concepts)
    unknown = [c for c in targets if c not in set(q.concepts)]
    if unknown:
        raise InvalidInput(("target_concepts",),
                         [f"concepts not in Q-matrix '{q.id}': {', '.join(unknown[:_LISTED])}"])
    missing = q.unknown_items(options.exclude_items)
    if missing:
        raise InvalidInput(("exclude_items",), [f"items not in Q-matrix '{q.id}': {', '.join(missing[:_LISTED])}"])
    return targets, set(options.exclude_items)


def _seed(tenant: str, student_id: str, responses: Sequence[Response]) -> int:
    """The randomesque draw's seed: the same student and responses draw the same items (a retry is stable)."""
    text = "\x1f".join([tenant, student_id, *(f"{r.item_id}={r.score:.6f}" for r in responses)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
