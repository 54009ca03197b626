"""CLI subcommands of `python -m analysis`, one module each.

Every module here defines `register(subparsers)`, which adds its subparser and sets
`func=<callable(args) -> int>` via `set_defaults`. `analysis.cli` discovers the modules, so a new
subcommand is a new file and nothing else.
"""
