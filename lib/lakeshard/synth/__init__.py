"""Synthetic landing zones: seeded, realistic multi-tenant event traffic with its ground truth.

Example::

    from lakeshard.synth import SynthSpec, generate_landing, read_manifest

    truth = generate_landing("/tmp/landing", SynthSpec(events=10_000, tenants=20, seed=3))
    assert read_manifest("/tmp/landing") == truth
"""

from __future__ import annotations

from lakeshard.synth.errors import ManifestError
from lakeshard.synth.generator import Progress, ProgressBar, generate_landing, new_run_folder
from lakeshard.synth.manifest import (
    EVENTS_FILE,
    MANIFEST_FILE,
    TRUTH_DIR,
    Burst,
    Manifest,
    read_manifest,
    read_truth_events,
)
from lakeshard.synth.spec import SynthSpec
from lakeshard.synth.timestamps import format_rfc3339
from lakeshard.synth.verify import TruthCheck, check_against_truth

__all__ = [
    "EVENTS_FILE",
    "MANIFEST_FILE",
    "TRUTH_DIR",
    "Burst",
    "Manifest",
    "ManifestError",
    "Progress",
    "ProgressBar",
    "SynthSpec",
    "TruthCheck",
    "check_against_truth",
    "format_rfc3339",
    "generate_landing",
    "new_run_folder",
    "read_manifest",
    "read_truth_events",
]
