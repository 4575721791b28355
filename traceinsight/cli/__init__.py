"""Floor 8, the command line: ``console`` (the installed entry point), ``app`` (the typer commands) and
``coerce`` (plain value conversion). The package itself imports nothing, so ``console`` can start cheaply.
"""
