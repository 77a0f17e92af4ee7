"""The embedded adapter (Spark or Arrow write Parquet, delta-rs commits): :class:`EmbeddedTableStore`.

Its modules: the adapter (:mod:`.adapter`), what it knows of each table's log (:mod:`.log`, :mod:`.probed_log`),
footers to add actions and swap commits (:mod:`.write`), blind appends committed without delta-rs
(:mod:`.append`) and delta-rs' storage options from the config (:mod:`.storage_options`).
"""

from lakeshard.lake.embedded.adapter import EmbeddedTableStore

__all__ = ["EmbeddedTableStore"]
