"""What every ``fedcd`` command shares: the Typer app, the consoles, option parsing."""

from __future__ import annotations

import typer
from rich.console import Console

__all__ = ["cli", "console", "err", "parse_epsilons"]

cli = typer.Typer(add_completion=False, help="fedcd: privacy-preserving multi-LLM federated cognitive diagnosis")
console = Console()
err = Console(stderr=True)


def parse_epsilons(text: str) -> list[float]:
    """'0.5,1,2,inf' -> [0.5, 1.0, 2.0]; ε = ∞ (no noise) is always evaluated."""
    values = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.lower() in ("inf", "none", "∞"):
            continue
        value = float(part)
        if not value > 0:
            raise ValueError(f"epsilon {part!r} must be > 0 (or 'inf')")
        values.append(value)
    return sorted(set(values))


