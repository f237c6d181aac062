"""Files and signatures that fit in a head (issue 23, part 3).

* No function outside the CLI takes more than ``MAX_PARAMETERS`` parameters: a wide call gets a config object
  (``federated.TrainingConfig``, ``federated.PublishOptions``, ``evaluation.harness.EvaluationConfig``,
  ``evaluation.frontier.FrontierSettings`` …). ``WIDE_ALLOWED`` lists the exceptions and why; an entry that no
  longer needs it must be removed, so the list only shrinks.
* Imports between fedcd's modules run one way: no cycle, a lazy (function-level) import included. Imports under
  ``if TYPE_CHECKING:`` do not run, so they do not count.

The CLI (``app/cli``) is exempt from the first rule: a typer command's parameters are its command-line options.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["qmatrix", "providers", "privacy", "diagnosis", "calibration", "evaluation", "federated", "bench", "app"]
MAX_PARAMETERS = 8

# "path:function" -> why it keeps more than MAX_PARAMETERS parameters.
WIDE_ALLOWED = {
    "diagnosis/posterior/aggregate.py:posterior_aggregate": "the functional form of PosteriorAggregator, whose fields "
    "are its keyword parameters: the aggregator is its config object",
    "calibration/fitting.py:calibration_record": "builds a CalibrationRecord: its parameters are the record's fields",
    "privacy/ledger/errors.py:__init__": "BudgetExceeded's fields: what a 429 reports (spent, cap, period, renewal)",
    # The ledger engine's constructor. Callers charge through privacy.Release (ledger.releasing); the engine's
    # charge takes the same typed values (a StudentKey, a ReleaseCost), guarded below.
    "privacy/ledger/core.py:__init__": "the ledger's database, its default budget (a cap or a BudgetRule), accountant, "
    "and the repeat window, pending TTL, clock and busy timeout its tests set",
    "privacy/ledger/release.py:__init__": "one release: for one student (with fingerprint and releases) or a group; "
    "built by AsyncLedger.releasing, never by hand",
    "app/services/students.py:__init__": "export and erasure reach every store that holds a student's data (ledger, "
    "policies, retention, usage, uploads, cache): the one service that must",
}


def _sources() -> list[Path]:
    return [path for name in PACKAGES for path in sorted((ROOT / name).rglob("*.py"))]


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def wide_functions() -> dict[str, int]:
    """``path:function`` -> parameter count, for every function outside app/cli with too many parameters."""
    found: dict[str, int] = {}
    for path in _sources():
        relative = _relative(path)
        if relative.startswith("app/cli/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = _parameter_count(node)
                if count > MAX_PARAMETERS:
                    found[f"{relative}:{node.name}"] = max(count, found.get(f"{relative}:{node.name}", 0))
    return found


def test_no_function_outside_the_cli_takes_more_than_eight_parameters() -> None:
    wide = wide_functions()
    unexplained = {name: count for name, count in wide.items() if name not in WIDE_ALLOWED}
    assert not unexplained, f"give these a config object (or say in WIDE_ALLOWED why not): {unexplained}"


def test_every_allowed_wide_function_still_needs_it() -> None:
    stale = sorted(set(WIDE_ALLOWED) - set(wide_functions()))
    assert not stale, f"no longer wide (or gone): remove from WIDE_ALLOWED: {stale}"


# -- imports run one way ----------------------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import that can run: at the top, in functions and classes, but not under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the fedcd modules it imports (a package's ``__init__`` left out on both ends: re-exporting a
    submodule is not a dependency of the package's modules on each other)."""
    paths = {_module_name(path): path for path in _sources()}
    packages = {name for name, path in paths.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        if name in packages:
            continue
        here = name.split(".")[:-1]
        targets: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                base = here[: len(here) - (node.level - 1)] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                candidates = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            targets |= {c for c in candidates if c in paths and c not in packages and c != name}
        graph[name] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return cycles


def test_imports_between_modules_have_no_cycle() -> None:
    assert not import_cycles(import_graph())


def test_the_cycle_scan_finds_a_lazy_cycle_and_ignores_type_checking_imports() -> None:
    # Prepare: a -> b at the top, b -> a inside a function (a lazy import still closes a cycle); c -> a only for
    # type checkers
    a = ast.parse("import b\n")
    b = ast.parse("def f():\n    from a import x\n")
    c = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import x\n")
    # Execute
    found = {name: [n.module if isinstance(n, ast.ImportFrom) else n.names[0].name for n in _runtime_imports(tree)]
             for name, tree in (("a", a), ("b", b), ("c", c))}
    # Assert
    assert found == {"a": ["b"], "b": ["a"], "c": ["typing"]}
    assert import_cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


# -- a typed privacy boundary (issue 35, parts 2 and 5) --------------------------------------------------------------
# What a student's budget is charged with travels as types: a StudentKey (the keyed hash), a ReleaseCost, accountant
# events as dataclasses, never ``**kwargs: Any``; a mechanism's name is spelled only where the registry reads it.

# The types that mark a module as part of the boundary when it imports them (or opens a release): a module that moves
# stays guarded.
_BOUNDARY_TYPES = {"AsyncLedger", "PrivacyLedger", "Release", "ReleaseCost", "StudentKey", "PrivacyAccountant",
                   "AccountingRecord"}


def privacy_boundary() -> list[str]:
    """privacy/ and every module that defines or imports the ledger's, a release's or an accountant's types, or opens a
    release."""
    found = []
    for path in _sources():
        relative = _relative(path)
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    and (node.module or "").split(".")[0] in ("privacy", "federated") for alias in node.names}
        defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
        releases = any(isinstance(node, ast.Attribute) and node.attr == "releasing" for node in ast.walk(tree))
        if relative.startswith("privacy/") or (imported | defined) & _BOUNDARY_TYPES or releases:
            found.append(relative)
    return found


def loose_keywords(tree: ast.Module) -> list[str]:
    """Functions taking ``**kwargs`` untyped or typed ``Any``: anything may cross there."""
    return [node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.args.kwarg is not None
            and (node.args.kwarg.annotation is None or ast.unparse(node.args.kwarg.annotation) in ("Any", "typing.Any"))]


def test_no_loose_keywords_cross_the_privacy_boundary() -> None:
    boundary = privacy_boundary()
    assert {"privacy/ledger/aio.py", "privacy/accountants.py", "federated/accountant.py"} <= set(boundary)
    assert any(path.startswith("app/") for path in boundary)  # the ledger's call sites are found
    loose = {path: names for path in boundary if (names := loose_keywords(ast.parse((ROOT / path).read_text())))}
    assert not loose, f"type what crosses the privacy boundary (no **kwargs: Any): {loose}"


def test_the_loose_keyword_scan_finds_untyped_and_any_but_not_typed_keywords() -> None:
    tree = ast.parse("def a(**kw: Any): ...\ndef b(**kw): ...\ndef c(**kw: float): ...\nasync def d(*, x: int): ...\n")
    assert loose_keywords(tree) == ["a", "b"]


def test_the_ledger_charges_a_student_key_and_a_release_cost() -> None:
    import typing
    from collections.abc import Sequence

    from federated.accountant import AccountingRecord, PrivacyAccountant, Step
    from privacy import Accountant, AsyncLedger, PrivacyLedger, ReleaseCost, StudentKey

    charge = typing.get_type_hints(PrivacyLedger.charge)
    assert charge["student"] is StudentKey and charge["cost"] is ReleaseCost
    assert not {"student_id", "epsilon", "delta", "mechanism", "sigma_over_sensitivity"} & set(charge)
    assert typing.get_type_hints(PrivacyLedger.charge_all)["students"] == Sequence[StudentKey]
    assert typing.get_type_hints(Accountant.step)["cost"] is ReleaseCost
    # The async face has the engine's signatures, parameter for parameter (generated from the engine's methods, or
    # written by hand: either way it must match), and is awaited.
    for name in ("charge", "charge_all", "store_answer", "lookup_repeat", "status", "release", "refund", "settle_all",
                 "get_charge"):
        engine, face = (inspect.signature(getattr(cls, name)) for cls in (PrivacyLedger, AsyncLedger))
        assert list(engine.parameters.values()) == list(face.parameters.values()), name
        assert inspect.iscoroutinefunction(getattr(AsyncLedger, name)), name
    # Accountant events and records are frozen types, made JSON only where they are stored.
    for kind in (ReleaseCost, AccountingRecord):
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert typing.get_type_hints(PrivacyAccountant.record)["return"] is AccountingRecord
    assert typing.get_type_hints(PrivacyAccountant.step) and Step._fields == ("noise_multiplier", "sample_rate", "steps")


def mechanism_names() -> set[str]:
    """Every name a mechanism is requested, described or charged by ("none" left out: it is also ε's "no noise")."""
    from privacy import COHORT_MECHANISM, MECHANISM_NAMES, mechanism_kind, names_of

    return ({COHORT_MECHANISM, *MECHANISM_NAMES} | {n for m in MECHANISM_NAMES for n in names_of(mechanism_kind(m))}) - {
        "none"}


def spelled_names(tree: ast.Module, names: set[str]) -> list[str]:
    """The mechanism names spelled as string literals in ``tree``, leaving out docstrings and a mechanism class's
    own ``name`` (``name: str = field(default="laplace", init=False)``, the one place a class names itself)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skipped.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and ast.unparse(statement.target) == "name" and statement.value:
                    skipped |= {id(n) for n in ast.walk(statement.value)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in names and id(node) not in skipped]


def test_mechanism_names_are_spelled_only_by_the_registry() -> None:
    # Watched: privacy/, the schemas and settings, diagnosis/ and the ledger's call sites in app/. Not federated/:
    # its Gaussian noise on model updates (DP-SGD, the item release) is no mechanism of the registry's.
    names = mechanism_names()
    assert {"laplace", "gaussian", "analytic_gaussian", "piecewise", "central_laplace"} <= names
    watched = {*(path for path in privacy_boundary() if not path.startswith("federated/")), *(
        _relative(p) for p in _sources() if _relative(p).startswith(("app/schemas/", "app/settings/", "diagnosis/")))}
    watched -= {"privacy/registry.py"}
    spelled = {path: found for path in sorted(watched)
               if (found := spelled_names(ast.parse((ROOT / path).read_text()), names))}
    assert not spelled, f"name a mechanism by its type or the registry's constants, not a string: {spelled}"


def test_the_name_scan_skips_docstrings_and_a_class_naming_itself() -> None:
    tree = ast.parse('"""laplace"""\nclass L:\n    """laplace"""\n    name: str = field(default="laplace")\n'
                     'x = "laplace"\ny = f"use laplace"\n')
    assert spelled_names(tree, {"laplace"}) == ["laplace"]


def test_a_noise_level_holds_the_registrys_mechanism_kind() -> None:
    import typing

    from diagnosis import NoiseLevel
    from privacy import Mechanism, PiecewiseMechanism

    assert typing.get_type_hints(NoiseLevel)["mechanism"] == type[Mechanism]
    level = NoiseLevel(mechanism="piecewise", epsilon=8.0)  # a name is read into its kind once, at the edge
    assert level.mechanism is PiecewiseMechanism and level.mechanism_name == "piecewise"
