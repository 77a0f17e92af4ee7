"""lakeshard's user-facing tables in a catalog: Unity Catalog on Databricks, the Spark session catalog locally.

Example::

    from lakeshard.catalog import register_tables

    register_tables(spark, "main", "lakeshard", "s3://bucket/lakehouse", store=store)
    spark.sql("SELECT count(*) FROM main.lakeshard.events")
"""

from __future__ import annotations

from lakeshard.catalog.registration import (
    LOCAL_CATALOG,
    RegisteredTable,
    quote_identifier,
    register_tables,
    registration_sql,
)

__all__ = ["LOCAL_CATALOG", "RegisteredTable", "quote_identifier", "register_tables", "registration_sql"]
