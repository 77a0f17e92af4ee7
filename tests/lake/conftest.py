"""The TableStore contract runs against every adapter: ``table_store`` is the embedded store, then the native one.

The native parameter carries the ``delta_jvm`` marker (``pytest -m delta_jvm`` selects it). It runs on the shared
session, which carries the Delta jars ``make env`` installed into ``.delta-jars/`` (``mvn``); without them it is
skipped with the reason, or fails when ``LAKESHARD_REQUIRE_DELTA_JVM`` is set (CI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from lakeshard.lake import TableStore


@pytest.fixture(params=["embedded", pytest.param("native", marks=pytest.mark.delta_jvm)])
def table_store(request: pytest.FixtureRequest, store: TableStore) -> TableStore:
    """Return each TableStore adapter over the shared session; the native one only where Delta's engine is."""
    if request.param == "embedded":
        return store
    native: TableStore = request.getfixturevalue("native_store")
    return native
