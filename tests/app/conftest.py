"""App fixtures live in tests/conftest.py (shared with the extraction API tests)."""

from tests.conftest import make_client

__all__ = ["make_client"]
