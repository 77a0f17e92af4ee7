"""The downstream Lakeflow pipeline's source files, run by the pipeline runner by path, never imported.

``closed_buckets.py`` declares the pipeline's datasets with ``pyspark.pipelines`` when it runs: it needs the
runner's active Spark session and is handed to the runner file by file (``bundles/downstream.pipeline.yml`` on
Databricks, :func:`lakeshard.downstream.write_local_spec` locally), never with this file. The folder is a package
only so that installing lakeshard ships it.
"""
