"""`python -m app.cli` = the `fedcd` command."""

from app.cli import main

main()
