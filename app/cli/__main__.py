"""``python -m app.cli``: the ``fedcd`` command without the console script (tests spawn it this way)."""

from app.cli import main

main()
