"""Register lakeshard's user-facing tables in a catalog by location, so they are queried by name.

On Databricks the catalog is Unity Catalog: the lakehouse sits at an external location and each user-facing
table (``events``, ``quarantine``, ``buckets``, ``pipeline_events``) becomes an external table of the bundle's
schema, with grants, lineage and ``SELECT * FROM <catalog>.<schema>.events``. Locally the same statements
register them in the Spark session catalog (``spark_catalog``), which needs Delta's catalog on the session.
The tables stay Delta tables at ``<lakehouse>/<table>``: registering names them, it does not copy or move data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from lakeshard.errors import ConfigError, EnvironmentProblem
from lakeshard.tables import USER_TABLE_SHAPES, USER_TABLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore

__all__ = ["LOCAL_CATALOG", "RegisteredTable", "quote_identifier", "register_tables", "registration_sql"]

LOCAL_CATALOG = "spark_catalog"  # Spark's session catalog: what a local session registers tables in

Status = Literal["created", "created_empty", "present", "missing"]


@dataclass(frozen=True)
class RegisteredTable:
    """One user-facing table and what :func:`register_tables` did about it."""

    name: str  # fully qualified, quoted: `catalog`.`schema`.`table`
    location: str  # the Delta table's URI, <lakehouse>/<table>
    # registered now, created empty at its location and registered now, already in the catalog, or no Delta table
    # at the location yet (and not asked to create it)
    status: Status


def quote_identifier(name: str, what: str) -> str:
    """Return ``name`` as a back-quoted SQL identifier.

    Raises:
        ConfigError: ``name`` is empty, with ``what`` it names.
    """
    if not name or not name.strip():
        raise ConfigError(f"{what}: expected a catalog object name, found {name!r}")
    return "`" + name.replace("`", "``") + "`"


def registration_sql(catalog: str, schema: str, table: str, location: str) -> str:
    """Return the statement that registers the Delta table at ``location`` as ``catalog.schema.table``.

    Example::

        registration_sql("main", "lakeshard", "events", "s3://bucket/lakehouse/events")
        # CREATE TABLE IF NOT EXISTS `main`.`lakeshard`.`events` USING DELTA LOCATION 's3://bucket/lakehouse/events'
    """
    name = ".".join((quote_identifier(catalog, "catalog"), quote_identifier(schema, "schema"),
                     quote_identifier(table, "table")))
    quoted = location.replace("\\", "\\\\").replace("'", "\\'")
    return f"CREATE TABLE IF NOT EXISTS {name} USING DELTA LOCATION '{quoted}'"


def register_tables(
    spark: SparkSession,
    catalog: str,
    schema: str,
    lakehouse: str,
    *,
    store: TableStore,
    tables: Sequence[str] = USER_TABLES,
    create_schema: bool = False,
    create_missing: bool = False,
) -> list[RegisteredTable]:
    """Return what registering each of ``tables`` of ``lakehouse`` in ``catalog.schema`` did.

    Each table that exists as a Delta table at ``<lakehouse>/<table>`` is registered with
    ``CREATE TABLE IF NOT EXISTS ... USING DELTA LOCATION`` (:func:`registration_sql`), so running it after every
    job is cheap and changes nothing once done. A table the pipeline has not created yet is reported ``missing``
    and registered by a later run, or, with ``create_missing``, created empty at its location first, with the
    schema, partitioning and description its owner creates it with (:data:`lakeshard.tables.USER_TABLE_SHAPES`),
    so that whatever reads it by name (the downstream pipeline) finds it before the first ingest. The owner's own
    ``create`` later finds the same table and keeps it.

    Args:
        spark: the session; on Databricks its catalog is Unity Catalog, locally the session catalog
            (:data:`LOCAL_CATALOG`, with Delta's ``DeltaCatalog`` configured).
        catalog: the catalog that holds ``schema``.
        schema: the schema the tables are registered in (the bundle creates it on Databricks).
        lakehouse: the lakehouse URI; on Databricks an external location (``s3://``, ``abfss://``, ``gs://``),
            because Unity Catalog defines no table on files in a volume.
        store: the TableStore that says whether a table exists yet.
        tables: the tables to register (default: the user-facing ones, :data:`lakeshard.tables.USER_TABLES`).
        create_schema: create ``schema`` first if it is missing (locally; on Databricks the bundle owns it).
        create_missing: create each missing user-facing table empty (through ``store``), then register it.

    Example::

        done = register_tables(spark, "spark_catalog", "lakeshard", "/tmp/lakehouse", store=store,
                               create_schema=True)
        spark.sql("SELECT count(*) FROM spark_catalog.lakeshard.events").show()

    Raises:
        ConfigError: an empty catalog, schema or table name, or ``create_missing`` for a table that is not one of
            the user-facing tables (only their shapes are known here).
        EnvironmentProblem: the session has no Delta data source to define the tables with.
    """
    qualified_schema = f"{quote_identifier(catalog, 'catalog')}.{quote_identifier(schema, 'schema')}"
    if create_schema:
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {qualified_schema}")
    out = []
    for table in tables:
        location = f"{lakehouse.rstrip('/')}/{table}"
        name = f"{qualified_schema}.{quote_identifier(table, 'table')}"
        made = False
        if not store.exists(location):
            if not create_missing:
                out.append(RegisteredTable(name, location, "missing"))
                continue
            shape = USER_TABLE_SHAPES.get(table)
            if shape is None:
                raise ConfigError(f"cannot create {name} empty: {table!r} is not a user-facing table "
                                  f"(known: {', '.join(USER_TABLE_SHAPES)})")
            store.create(location, shape.schema, partition_by=shape.partition_by, properties=shape.properties,
                         description=shape.description)
            made = True
        present = spark.catalog.tableExists(f"{catalog}.{schema}.{table}")
        if not present:
            try:
                spark.sql(registration_sql(catalog, schema, table, location))
            except Exception as exc:
                if "DATA_SOURCE_NOT_FOUND" in str(exc) or "DELTA.DefaultSource" in str(exc):
                    raise EnvironmentProblem(
                        f"cannot register {name}: this Spark session has no Delta data source (Delta's jars are not "
                        "on its classpath); run `make env` where Maven Central is reachable (it installs them into "
                        ".delta-jars/), set spark.jars, or register on Databricks") from None
                raise
        out.append(RegisteredTable(name, location, "present" if present else "created_empty" if made else "created"))
    return out
