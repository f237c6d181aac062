"""The gateway's layers stay apart.

* The gateway does not import the evaluation package (issue 23, part 3): what ``/v1/calibrate`` needs from the
  evaluation's toolbox (dataset loading, seeded splits, the proportion-correct truth) lives in ``qmatrix``; only the
  CLI (``fedcd evaluate``) reaches into ``evaluation`` (the served row measured over HTTP, ``evaluation/served_api.py``,
  drives a gateway process and imports nothing of ``app``).
* One data path (issue 35, part 1): routes and the console reach data through the services, never through the
  database's rows or tables; the gateway object is the one thing on ``app.state`` (``app.deps`` reads through it).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import make_client

ROOT = Path(__file__).resolve().parents[2]
# Modules of app/ that may import evaluation: the CLI runs the evaluation.
MAY_IMPORT_EVALUATION = ("app/cli/",)

BUILD_THE_APP = """
import sys, tempfile
import app.main
from app import create_app
from app.settings import Settings
create_app(Settings(state_dir=tempfile.mkdtemp(), preload_models=False, default_calibration=False,
                    train_default_model=False))
loaded = sorted(m for m in sys.modules if m == "evaluation" or m.startswith("evaluation."))
assert not loaded, loaded
"""


def _imported_modules(tree: ast.AST) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):  # every import, at the top or inside a function
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return found


def _imported_names(tree: ast.AST) -> list[str]:
    """Every module an import names, and for ``from X import y`` also ``X.y`` (``from app import db`` is ``app.db``)."""
    found = _imported_modules(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return found


# What holds the database's rows and tables: the console reads none of it itself (issue 35, part 1).
STORAGE = ("app.db", "app.storage", "sqlalchemy", "privacy.ledger")


def _is_storage(module: str) -> bool:
    return any(module == s or module.startswith(s + ".") for s in STORAGE)


def _state_writes(tree: ast.AST) -> list[str]:
    """The attributes a module sets on an app's ``state`` (``app.state.x = …``, ``request.app.state.x = …``,
    ``setattr(app.state, …)``)."""
    def on_app_state(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "state"
                and (isinstance(node.value, ast.Name) and node.value.id == "app"
                     or isinstance(node.value, ast.Attribute) and node.value.attr == "app"))

    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        found.extend(t.attr for t in targets if isinstance(t, ast.Attribute) and on_app_state(t.value))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args
                and on_app_state(node.args[0])):
            found.append(ast.unparse(node.args[1]) if len(node.args) > 1 else "?")
    return found


def test_building_the_app_imports_no_evaluation_module() -> None:
    # Execute: a fresh interpreter, so no other test's imports count
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FEDCD_CONFIG", None)
    result = subprocess.run([sys.executable, "-c", BUILD_THE_APP], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    # Assert
    assert result.returncode == 0, result.stderr[-3000:]


def test_no_gateway_module_imports_evaluation() -> None:
    offenders = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(MAY_IMPORT_EVALUATION):
            continue
        for module in _imported_modules(ast.parse(path.read_text())):
            if module == "evaluation" or module.startswith("evaluation."):
                offenders.append(f"{relative} imports {module}")
    assert not offenders, offenders


def test_routes_reach_the_database_only_through_services_and_stores() -> None:
    """Thin routes (README "A request's path"): a route parses, authorizes and calls a service (or a store's one read);
    it never opens a session, builds a statement or reads a job runner's rows itself."""
    offenders = []
    for path in sorted((ROOT / "app" / "routes").rglob("*.py")):
        for module in _imported_modules(ast.parse(path.read_text())):
            if module in ("app.db", "app.jobs.runner", "app.jobs.context") or module.split(".")[0] == "sqlalchemy":
                offenders.append(f"{path.relative_to(ROOT).as_posix()} imports {module}")
    assert not offenders, offenders


def test_the_console_imports_no_storage() -> None:
    """The console shows what the services give it (``app.console.data`` calls them through the gateway): no module
    of app/console imports the database's rows (``app.db``), the stores' modules, SQLAlchemy or the ledger's
    tables."""
    offenders = []
    for path in sorted((ROOT / "app" / "console").rglob("*.py")):
        for module in _imported_names(ast.parse(path.read_text())):
            if _is_storage(module):
                offenders.append(f"{path.relative_to(ROOT).as_posix()} imports {module}")
    assert not offenders, offenders


def test_the_storage_scan_finds_every_form_of_import() -> None:
    # Prepare: the forms an import of storage takes; one that is not
    tree = ast.parse("import sqlalchemy.orm\nfrom app import db\n"
                     "def f():\n    from privacy.ledger.tables import charges\n"
                     "from app.storage.calibrations import StoredCalibration\nfrom app.schemas import JobPublic\n")
    # Execute
    found = sorted({m for m in _imported_names(tree) if _is_storage(m)})
    # Assert
    assert found == ["app.db", "app.storage.calibrations", "app.storage.calibrations.StoredCalibration",
                     "privacy.ledger.tables", "privacy.ledger.tables.charges", "sqlalchemy.orm"]


def test_only_the_gateway_is_set_on_app_state_in_the_code() -> None:
    writes = {}
    for path in sorted((ROOT / "app").rglob("*.py")):
        names = [n for n in _state_writes(ast.parse(path.read_text())) if n != "gateway"]
        if names:
            writes[path.relative_to(ROOT).as_posix()] = names
    assert not writes, writes


def test_only_app_deps_reads_app_state() -> None:
    """Routes, the console and the services get what they need from ``app.deps`` (which reads ``app.state.gateway``),
    never from ``app.state`` themselves; ``app.main`` puts the gateway there."""
    readers = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in ("app/deps.py", "app/main.py"):
            continue
        readers.extend(f"{relative}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text()))
                       if isinstance(node, ast.Attribute) and node.attr == "state"
                       and (isinstance(node.value, ast.Name) and node.value.id == "app"
                            or isinstance(node.value, ast.Attribute) and node.value.attr == "app"))
    assert not readers, readers


def test_the_state_scan_finds_every_form_of_write() -> None:
    # Prepare
    tree = ast.parse("app.state.gateway = g\nrequest.app.state.keys = k\nsetattr(app.state, 'x', 1)\n"
                     "request.state.principal = p\nself.state = s\n")
    # Execute
    found = _state_writes(tree)
    # Assert: request.state (per request) and other objects' state are not the app's
    assert found == ["gateway", "keys", "'x'"]


def test_only_the_gateway_is_on_a_running_apps_state(tmp_path: Path) -> None:
    """Run: started, serving the API and the console (whose sign-in secret was once kept on app.state too)."""
    # Prepare
    with make_client(tmp_path, {}) as client:
        # Execute
        assert client.get("/healthz").status_code == 200
        assert client.get("/console/login").status_code == 200
        assert client.get("/v1/jobs").status_code == 200
        state = dict(client.app.state._state)  # type: ignore[attr-defined]
    # Assert
    assert list(state) == ["gateway"]


# Below the routes: what raises domain errors (app.domain_errors) and never an HTTP response's parts.
BELOW_THE_ROUTES = ("app/services/", "app/jobs/", "app/storage/", "app/limits.py")
_HTTP_MODULES = ("app.errors", "fastapi", "starlette")
_REQUEST_PARTS = ("body", "path", "query")


def _http_leaks(tree: ast.AST) -> list[str]:
    """What in a module below the routes speaks HTTP: an import of the route layer's errors or of the web framework,
    a raise that carries a status code, a ``loc`` tuple naming where in a request a field was sent."""
    found = [f"imports {m}" for m in _imported_modules(tree)
             if any(m == h or m.startswith(h + ".") for h in _HTTP_MODULES)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            found.extend(f"raises with {k.arg}=" for k in node.exc.keywords if k.arg in ("status_code", "retry_after"))
        if (isinstance(node, ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant)
                and node.elts[0].value in _REQUEST_PARTS):
            found.append(f"builds a loc {ast.unparse(node)}")
    return found


def test_services_raise_domain_errors_without_http() -> None:
    """Services, jobs, stores and limits raise ``app.domain_errors``; ``app.errors`` alone gives them their status
    and the ``loc`` of their field (issue 35, part 1)."""
    offenders = {}
    for path in sorted((ROOT / "app").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(BELOW_THE_ROUTES):
            leaks = _http_leaks(ast.parse(path.read_text()))
            if leaks:
                offenders[relative] = leaks
    assert not offenders, offenders


def test_the_http_scan_finds_each_leak() -> None:
    # Prepare: each leak once, and what is not one (a domain error with its field; a response schema's status)
    tree = ast.parse("from app.errors import InputError\nimport fastapi\n"
                     "raise InputError(('body', 'x'), ['m'], status_code=404)\n"
                     "raise NotFound(('x',), ['m'])\nerror = BatchError(status_code=503)\n")
    # Execute
    found = _http_leaks(tree)
    # Assert
    assert found == ["imports app.errors", "imports fastapi", "raises with status_code=", "builds a loc ('body', 'x')"]


def test_the_tests_of_app_mirror_its_subpackages() -> None:
    """tests/app/ is split like app/ (issue 35, part 4): each folder there tests the app subpackage of the same name,
    and no test module sits beside a folder of the same concern (tests/app/jobs/ and tests/app/test_jobs.py)."""
    tests = ROOT / "tests" / "app"
    folders = sorted(p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders, "tests/app has no subfolders"
    unmatched = [name for name in folders if not (ROOT / "app" / name / "__init__.py").is_file()]
    assert not unmatched, f"tests/app folders without an app subpackage: {unmatched}"
    beside = [p.name for p in tests.glob("test_*.py") if p.stem.removeprefix("test_") in folders]
    assert not beside, f"test modules beside the folder of their concern: {beside}"
