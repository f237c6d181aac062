"""federated/: ``__all__`` is exact, no Flower anywhere, imports only qmatrix of fedcd, modules stay small."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import federated

PACKAGE = Path(federated.__file__).parent
FEDCD_PACKAGES = {"app", "providers", "privacy", "calibration", "qmatrix", "federated"}


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
    return found


def test_all_names_exactly_the_public_names() -> None:
    public = {n for n, v in vars(federated).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert set(federated.__all__) == public
    assert len(federated.__all__) == len(set(federated.__all__))


def test_no_flower_and_only_qmatrix_of_fedcd() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if (PACKAGE / "flower") in path.parents:
            continue  # the Flower app wraps the model; only it may import flwr (test_flower_exports checks the rest)
        for module in _imports(path):
            top = module.split(".")[0]
            if top in {"flwr", "ray", "opacus"} or (top in FEDCD_PACKAGES and top not in {"qmatrix", "federated"}):
                offenders.append(f"{path.name} imports {module}")
    assert not offenders, offenders


def test_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert max(sizes.values()) < 320, sizes
