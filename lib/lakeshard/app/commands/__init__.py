"""The ``lakeshard`` subcommands of each domain: every module has ``add_commands(sub, common)``."""

__all__: list[str] = []
