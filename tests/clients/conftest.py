"""The client's tests import ``fedcd_client`` from the working tree (clients/python/src), whether or not
``make install`` has installed it into the venv: a checkout's tests never run an older installed copy."""

from __future__ import annotations

import sys
from pathlib import Path

_SRC = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
if str(_SRC) not in sys.path:
    sys.path.insert(0, str(_SRC))
