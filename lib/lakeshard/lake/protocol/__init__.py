"""The Delta protocol pieces both adapters share: log replay (:mod:`.log`), Parquet data files and their footer
statistics (:mod:`.datafiles`, :mod:`.rowgroups`), the file system behind a table (:mod:`.filesystem`) and Hive-style
partition directories written from Arrow (:mod:`.partitions`). Other packages use them through
:mod:`lakeshard.lake`."""

__all__: list[str] = []
