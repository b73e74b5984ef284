"""`python -m mobilekd VERB ...`: the same as the `mobilekd` command."""

from mobilekd.cli import main

main()
