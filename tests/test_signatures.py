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
    # The ledger engine's primitives. Callers go through privacy.Release (ledger.releasing), which takes a
    # ReleaseCost; the engine keeps one flat keyword form that its accountants, crash tests and CLI share.
    "privacy/ledger/core.py:__init__": "the ledger's database, its default budget (a cap or a BudgetRule), accountant, "
    "and the repeat window, pending TTL, clock and busy timeout its tests set",
    "privacy/ledger/core.py:charge": "one charge row's fields (ε, δ, mechanism, σ/Δ, releases, fingerprint, rule, "
    "source): privacy.Release is the one caller in the service",
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
