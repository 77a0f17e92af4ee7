"""Progress bars on the terminal (tqdm), for the long steps the command line and the demo run."""

from __future__ import annotations

from lakeshard.synth import Progress, ProgressBar

__all__ = ["landing_bar"]


def _landing_bar(total: int) -> Progress:
    from tqdm.auto import tqdm

    bar: Progress = tqdm(total=total, unit="rec", unit_scale=True, desc="synth landing")
    return bar


def landing_bar(enabled: bool) -> ProgressBar | None:
    """Return what :func:`~lakeshard.synth.generate_landing` shows its progress with: a tqdm bar, or nothing."""
    return _landing_bar if enabled else None
