"""CLI subcommands of `python -m analysis`, one module each.

Every module here defines `register(subparsers)`, which adds its subparser and sets
`func=<callable(args) -> int>` via `set_defaults`. `analysis.cli` discovers the modules, so a new
subcommand is a new file and nothing else. A command's `run(args)` builds its frozen options
object (`_options.CommandOptions`) and passes that on; the work lives in the analysis units, and
a command imports no other command (tests/test_architecture.py). `_`-prefixed modules are not
commands: `_flags` defines the flags the commands share, `_options` their options objects and output.
"""
