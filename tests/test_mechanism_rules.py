"""A privacy mechanism is one type from end to end (issue 23).

Only ``privacy/registry.py`` reads a mechanism's name: everywhere else a ``privacy.Mechanism`` object
travels and is asked for its noise, its description, its charge and its likelihood. And no module of
any package imports another module's private (``_``) names.
"""

from __future__ import annotations

import ast
import json
import typing
from pathlib import Path

import pytest

from calibration.exclusion import ExcludingPosteriorAggregator
from diagnosis import Aggregator, FederationMode, PosteriorAggregator, ReportModel
from privacy import MECHANISM_NAMES, Mechanism, mechanism_for_request, mechanism_from_description, names_of

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["qmatrix", "providers", "privacy", "diagnosis", "calibration", "evaluation", "federated", "bench", "app"]
REGISTRY = ROOT / "privacy" / "registry.py"
# Packages that must import no other module's private (``_``) names: every one (issue 23, part 3). A helper two
# modules share is public in the module that owns it.
NO_PRIVATE_IMPORTS = PACKAGES


def _mechanism_types() -> list[type[Mechanism]]:
    found, todo = [], [Mechanism]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            found.append(sub)
    return found


def _names() -> set[str]:
    return set().union(*(names_of(kind) for kind in _mechanism_types()))


def _sources(packages: list[str]) -> list[Path]:
    return [path for name in packages for path in sorted((ROOT / name).rglob("*.py"))]


def _name_literals(node: ast.AST, names: set[str]) -> list[str]:
    return [sub.value for sub in ast.walk(node) if isinstance(sub, ast.Constant) and sub.value in names]


def _name_switches(source: str, where: str, names: set[str]) -> list[str]:
    """Comparisons, ``in`` tests and ``match`` cases against a mechanism's name, and sets of names (what a
    membership test would use). "none" is an ordinary word, so it counts only where a mechanism is compared.
    One entry per offending line, in line order."""
    found: dict[int, set[str]] = {}
    for node in ast.walk(ast.parse(source)):
        hits: list[str] = []
        if isinstance(node, ast.Compare):
            hits = _name_literals(node, names)
            segment = ast.get_source_segment(source, node) or ""
            if "mech" not in segment:
                hits = [h for h in hits if h != "none"]
        elif isinstance(node, ast.match_case):
            hits = _name_literals(node.pattern, names - {"none"})
        elif isinstance(node, ast.Set) or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "frozenset")
        ):
            literals = _name_literals(node, names - {"none"})
            hits = literals if len(literals) >= 2 else []
        if hits:
            line = node.pattern.lineno if isinstance(node, ast.match_case) else node.lineno  # type: ignore[attr-defined]
            found.setdefault(line, set()).update(hits)
    return [f"{where}:{line} {sorted(hits)}" for line, hits in sorted(found.items())]


def test_the_registry_knows_every_mechanism_by_the_names_a_request_and_a_description_use() -> None:
    assert set(MECHANISM_NAMES) <= _names()
    assert {"none", "analytic_gaussian"} <= _names()  # NoNoise and the Gaussian describe themselves so


def test_no_module_outside_the_registry_switches_on_a_mechanism_name() -> None:
    names = _names()
    offenders = [
        hit
        for path in _sources(PACKAGES)
        if path != REGISTRY
        for hit in _name_switches(path.read_text(), str(path.relative_to(ROOT)), names)
    ]
    assert not offenders, offenders


def test_the_scan_finds_a_name_switch() -> None:
    tree = """
def kernel(mechanism):
    if mechanism.name == "piecewise":
        return 1
    match mechanism.name:
        case "duchi":
            return 2
GAUSSIAN = frozenset({"gaussian", "analytic_gaussian"})
status = "none" == "none"
"""
    hits = _name_switches(tree, "probe", _names())
    assert [h.split(" ", 1)[0] for h in hits] == ["probe:3", "probe:6", "probe:8"]


@pytest.mark.parametrize("package", NO_PRIVATE_IMPORTS)
def test_no_private_name_is_imported_from_another_module(package: str) -> None:
    offenders = []
    for path in _sources([package]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    offenders.append(f"{path.relative_to(ROOT)} imports {private} from {node.module}")
    assert not offenders, offenders


@pytest.mark.parametrize("name", MECHANISM_NAMES)
def test_a_mechanism_is_built_once_per_parameters_and_survives_its_description(name: str) -> None:
    # Prepare
    build = {"name": name, "epsilon": 2.0, "mode": "assessed", "n_concepts_total": 5, "n_concepts_assessed": 3}
    mechanism = mechanism_for_request(**build)  # type: ignore[arg-type]
    # Execute
    stored = json.loads(json.dumps(mechanism.describe()))
    rebuilt = mechanism_from_description(stored)
    # Assert: the same object for the same parameters; the description round-trips to an equal mechanism
    assert mechanism_for_request(**build) is mechanism  # type: ignore[arg-type]
    assert rebuilt == mechanism and type(rebuilt) is type(mechanism)
    assert rebuilt.describe() == mechanism.describe() and rebuilt.charge() == mechanism.charge()
    assert ReportModel(rebuilt, 0.1) == ReportModel(mechanism, 0.1)


@pytest.mark.parametrize(
    ("function", "name"),
    [
        (Aggregator.aggregate, "aggregate"),
        (PosteriorAggregator.aggregate, "posterior aggregate"),
        (ExcludingPosteriorAggregator.aggregate, "excluding aggregate"),
        (FederationMode.verdict, "verdict"),
    ],
)
def test_mechanism_objects_not_dicts_travel_through_the_pipeline(function: object, name: str) -> None:
    hints = typing.get_type_hints(function)
    assert hints["mechanism"] is Mechanism, name
