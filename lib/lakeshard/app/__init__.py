"""The presentation wing above the domain packages: the ``lakeshard`` command line (:mod:`.cli`, one module per
domain's commands in :mod:`.commands`), the end-to-end demo (:mod:`.demo`) and the figures (:mod:`.plots`).

Domain packages never import this package; matplotlib and tqdm (the ``app`` extra) are imported only here. The
face gives what a command of its own needs to read the shared flags; the command line itself is
:func:`lakeshard.app.cli.main` (imported on its own, so ``python -m lakeshard.app.cli`` runs it once; the console
script and ``-m`` go through :func:`lakeshard.app.cli.run`, which ends the process at once after it).
"""

from __future__ import annotations

from lakeshard.app.cli_args import config_from_args, iso_timestamp

__all__ = ["config_from_args", "iso_timestamp"]
