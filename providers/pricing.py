"""What an entity's answer cost in dollars, from its token usage and its configured price.

Prices are per million tokens, input (prompt) and output (completion) priced separately, as the
hosted vendors bill them. ``EntitySpec.input_usd_per_mtok`` / ``output_usd_per_mtok`` carry them;
the defaults of the hosted models are in ``providers.config.DEFAULT_HOSTED`` with the date they
were read. Embedded models, ``local-fed`` and simulated entities cost 0 unless configured (a
simulated entity priced like a hosted model estimates what that model would have cost).
"""

from __future__ import annotations

from dataclasses import dataclass

from providers.config import EntitySpec
from providers.types import TokenUsage

__all__ = ["FREE", "Price", "price_of"]

_PER_MTOK = 1_000_000


@dataclass(frozen=True, kw_only=True)
class Price:
    """US dollars per million prompt (input) and completion (output) tokens."""

    input_usd_per_mtok: float = 0.0
    output_usd_per_mtok: float = 0.0

    def __post_init__(self) -> None:
        if self.input_usd_per_mtok < 0 or self.output_usd_per_mtok < 0:
            raise ValueError(f"prices must be >= 0, got {self.input_usd_per_mtok}, {self.output_usd_per_mtok}")

    def cost_usd(self, usage: TokenUsage) -> float:
        return (
            usage.prompt_tokens * self.input_usd_per_mtok + usage.completion_tokens * self.output_usd_per_mtok
        ) / _PER_MTOK


FREE = Price()


def price_of(spec: EntitySpec) -> Price:
    return Price(input_usd_per_mtok=spec.input_usd_per_mtok, output_usd_per_mtok=spec.output_usd_per_mtok)
