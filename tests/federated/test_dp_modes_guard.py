"""Guard (issue 35, part 5): the federated DP mode's name is compared nowhere but in its registry.

A mode is a type (``federated.modes``: ``NoDP``, ``ClientLevelDP``, ``StudentLevelDP``) that owns its mechanism,
its weights and what it may reveal; the names ``"none"``, ``"student"`` and ``"client"`` are read by
``federated.modes.dp_mode`` alone. A comparison such as ``config.dp == "student"`` or ``dp in ("none", "client")``
anywhere else is a place the next mode would be forgotten: ask the mode instead (``dp.private``,
``dp.noise_at_clients``, ``dp.reveals_counts`` …).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["qmatrix", "providers", "privacy", "diagnosis", "calibration", "evaluation", "federated", "bench", "app"]
REGISTRY = "federated/modes.py"
NAMES = frozenset({"none", "student", "client"})
MODE_WORDS = frozenset({"dp", "dp_mode"})  # what the mode is called where it travels as a value


def _names_the_mode(node: ast.expr) -> bool:
    """``dp``, ``x.dp``, ``x["dp_mode"]`` or ``x.get("dp", …)``: an expression holding the DP mode."""
    if isinstance(node, ast.Name):
        return node.id in MODE_WORDS
    if isinstance(node, ast.Attribute):
        return node.attr in MODE_WORDS
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in MODE_WORDS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        first = node.args[0]
        return isinstance(first, ast.Constant) and first.value in MODE_WORDS
    return False


def _is_mode_name(node: ast.expr) -> bool:
    """A mode's name as a literal, or a tuple/list/set holding one (``in ("none", "client")``)."""
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_mode_name(e) for e in node.elts)
    return False


def mode_comparisons(source: str) -> list[int]:
    """Line numbers of comparisons between the DP mode and one of its names in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_names_the_mode(o) for o in operands) and any(_is_mode_name(o) for o in operands):
                found.append(node.lineno)
    return found


def test_the_scan_finds_the_comparisons_it_forbids() -> None:
    # Prepare: the shapes the mode used to be compared in (federated/train.py, inprocess.py, flower/, the CLI)
    source = "\n".join([
        'a = config.dp == "student"',
        'b = "none" != fed.dp',
        'c = dp in ("none", "student", "client")',
        'd = options.get("dp", "none") == "none"',
        'e = manifest["dp_mode"] == "client"',
        'f = epsilon == "none"',  # another field's "none": not the mode
        'g = role in ("client", "admin")',  # another vocabulary: not the mode
        'h = config.dp.private',
    ])

    # Execute
    lines = mode_comparisons(source)

    # Assert
    assert lines == [1, 2, 3, 4, 5]


def test_no_dp_mode_name_is_compared_outside_its_registry() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == REGISTRY:
                continue
            offenders += [f"{relative}:{line}" for line in mode_comparisons(path.read_text(encoding="utf-8"))]
    assert not offenders, f"compare the DP mode's name only in {REGISTRY}; ask the mode instead: {offenders}"
