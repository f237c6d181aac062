"""federated.flower: ``__all__`` is exact, modules stay small, and Flower stays inside this subpackage."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import federated
import federated.flower

FLOWER = Path(federated.flower.__file__).parent
FEDERATED = Path(federated.__file__).parent
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
    public = {n for n, v in vars(federated.flower).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert set(federated.flower.__all__) == public
    assert len(federated.flower.__all__) == len(set(federated.flower.__all__))


def test_flower_is_imported_only_inside_federated_flower() -> None:
    offenders = [f"{path.relative_to(FEDERATED)} imports {module}"
                 for path in FEDERATED.rglob("*.py") if FLOWER not in path.parents
                 for module in _imports(path)
                 if module.split(".")[0] == "flwr" or module.startswith("federated.flower")]
    assert not offenders, offenders


def test_flower_subpackage_uses_only_federated_and_qmatrix_of_fedcd() -> None:
    offenders = [f"{path.name} imports {module}" for path in FLOWER.glob("*.py") for module in _imports(path)
                 if module.split(".")[0] in FEDCD_PACKAGES - {"federated", "qmatrix"}
                 or module.split(".")[0] in {"ray", "opacus"}]
    assert not offenders, offenders


def test_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in FLOWER.glob("*.py")}
    assert max(sizes.values()) < 300, sizes
