"""The gateway does not import the evaluation package (issue 23, part 3): what ``/v1/calibrate`` needs from the
evaluation's toolbox (dataset loading, seeded splits, the proportion-correct truth) lives in ``qmatrix``; only the
CLI (``fedcd evaluate``) reaches into ``evaluation`` (the served row measured over HTTP, ``evaluation/served_api.py``,
drives a gateway process and imports nothing of ``app``)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

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
            if module in ("app.db", "app.services.jobs", "app.services.job_context") or module.split(".")[0] == "sqlalchemy":
                offenders.append(f"{path.relative_to(ROOT).as_posix()} imports {module}")
    assert not offenders, offenders
