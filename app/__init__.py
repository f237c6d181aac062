"""The HTTP gateway and the CLI (the top layer)."""

from app.main import create_app
from app.settings import Settings, get_settings

__all__ = ["Settings", "create_app", "get_settings"]
