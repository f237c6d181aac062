"""Each package's ``__all__`` names exactly what it exports, and imports run one way."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGES = ["qmatrix", "providers", "privacy", "diagnosis", "calibration", "evaluation", "federated", "bench", "app"]
ROOT = Path(__file__).resolve().parents[1]

# Which fedcd packages each package may import:
# app → evaluation → calibration → diagnosis → privacy, providers → qmatrix.
ALLOWED = {
    "qmatrix": set(),
    "privacy": set(),
    "providers": {"federated", "qmatrix"},  # providers serves the federated-trained model
    "diagnosis": {"privacy", "providers", "qmatrix"},
    "calibration": {"diagnosis", "privacy", "providers", "qmatrix"},
    # evaluation trains the local-fed member of the served configuration on each run's train split
    # and measures the served row through a gateway process it starts (evaluation.served_api: bench.processes)
    "evaluation": {"bench", "calibration", "diagnosis", "federated", "privacy", "providers", "qmatrix"},
    # federated uses qmatrix/privacy; providers serves its trained model (DEVELOPERS.md).
    "federated": {"privacy", "qmatrix"},
    # bench drives the gateway over HTTP; it uses providers only to time one SDK call in-process.
    "bench": {"providers"},
    "app": {"bench", "calibration", "diagnosis", "evaluation", "federated", "privacy", "providers", "qmatrix"},
}


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_only_real_public_names(name: str) -> None:
    module = importlib.import_module(name)
    for symbol in module.__all__:
        assert hasattr(module, symbol), f"{name}.__all__ names missing {symbol}"
    assert len(set(module.__all__)) == len(module.__all__)


@pytest.mark.parametrize("name", PACKAGES)
def test_imports_run_one_way(name: str) -> None:
    offenders = []
    for path in (ROOT / name).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for module in modules:
                top = module.split(".")[0]
                if top in ALLOWED and top != name and top not in ALLOWED[name]:
                    offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not offenders, offenders


def test_docker_image_copies_every_package() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    for name in PACKAGES:
        assert f"COPY {name} ./{name}" in dockerfile
