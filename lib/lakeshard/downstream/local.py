"""Run the downstream pipeline locally with Spark's ``spark-pipelines`` runner over a lakehouse on disk."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import sys
from pathlib import Path

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.errors import EnvironmentProblem
from lakeshard.runtime import delta_jars, local_spark_conf
from lakeshard.tables import BUCKETS, EVENTS

__all__ = ["BUCKETS_TABLE_KEY", "EVENTS_TABLE_KEY", "TRANSFORMATIONS", "local_command", "write_local_spec"]

# The pipeline's configuration keys naming its sources: table names on Databricks, Delta table paths locally.
EVENTS_TABLE_KEY = "lakeshard.events_table"
BUCKETS_TABLE_KEY = "lakeshard.buckets_table"
TRANSFORMATIONS = Path(__file__).with_name("transformations")


def write_local_spec(folder: Path, lakehouse: str, *, name: str = "lakeshard-downstream") -> Path:
    """Return the ``spark-pipeline.yml`` written into ``folder`` for a local run over ``lakehouse``.

    The sources are the lakehouse's Delta tables by path; the pipeline's checkpoints go to ``folder/storage``
    and its tables to the warehouse :func:`local_command` sets (``folder/warehouse``). The runner only globs
    below the spec's folder, so the pipeline's source files are copied to ``folder/transformations``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(TRANSFORMATIONS, folder / "transformations", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    root = lakehouse.rstrip("/")
    spec = {
        "name": name,
        "storage": (folder / "storage").resolve().as_uri(),
        "libraries": [{"glob": {"include": "transformations/**"}}],
        "configuration": {EVENTS_TABLE_KEY: f"{root}/{EVENTS}", BUCKETS_TABLE_KEY: f"{root}/{BUCKETS}"},
    }
    path = folder / "spark-pipeline.yml"
    # JSON is YAML: the runner reads the file with a YAML parser, and lakeshard needs no YAML writer for it.
    path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    return path


def local_command(spec: Path, cfg: LakeshardConfig | None = None) -> tuple[list[str], dict[str, str]]:
    """Return the ``spark-pipelines run`` command for ``spec`` and the environment variables it needs.

    The runner starts its Spark in its Python process, from ``PYSPARK_SUBMIT_ARGS``: that is where the settings
    go that cannot change once Spark runs. They are those of lakeshard's own local session under ``cfg`` (default:
    :func:`~lakeshard.config.load_config`): few shuffle partitions and Delta snapshot partitions, no UI, UTC, the
    driver's memory, Delta's ``spark.jars`` (default: the ones ``make env`` installed,
    :func:`lakeshard.runtime.delta_jars`), extension, catalog and lakeshard's log store; then Delta as the default
    format and the warehouse. Spark's defaults (200 shuffle partitions, a Delta snapshot job of 50 tasks) made the
    small demo's downstream run take minutes on two cores. Run it with ``spec``'s folder as working directory.

    Raises:
        EnvironmentProblem: no ``spark-pipelines`` next to this interpreter or on PATH (pyspark 4.1+ ships it),
            or no Delta jars (the pipeline's sources and its tables are Delta tables).
    """
    runner = Path(sys.executable).with_name("spark-pipelines")
    found = str(runner) if runner.exists() else shutil.which("spark-pipelines")
    if not found:
        raise EnvironmentProblem(f"spark-pipelines not found next to {sys.executable} nor on PATH; "
                                 "it comes with pyspark 4.1 or newer (the local extra)")
    cfg = cfg if cfg is not None else load_config()
    jars = cfg.spark.jars or delta_jars()
    if not jars.strip():
        raise EnvironmentProblem("the downstream pipeline reads and writes Delta tables: set spark.jars "
                                 "(LAKESHARD_SPARK_JARS) to delta-spark's jars, or install them with 'make env'")
    session = local_spark_conf(dataclasses.replace(cfg, spark=dataclasses.replace(cfg.spark, jars=jars)))
    # The pipeline's tables are Delta tables, as on Databricks.
    conf = {**session, "spark.sql.sources.default": "delta",
            "spark.sql.warehouse.dir": (spec.parent / "warehouse").resolve().as_uri()}
    submit = [*(part for key, value in conf.items() for part in ("--conf", f"{key}={value}")), "pyspark-shell"]
    env = {"PYSPARK_SUBMIT_ARGS": shlex.join(submit), "PYSPARK_PYTHON": sys.executable}
    return [found, "run", "--spec", str(spec)], env
