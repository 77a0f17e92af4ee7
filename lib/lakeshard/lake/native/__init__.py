"""The native adapter (Delta's own JVM engine through delta-spark): :class:`NativeTableStore`.

Its modules: the adapter (:mod:`.adapter`), Delta's public writer (:mod:`.public`), commits through Delta's
internal transaction (:mod:`.commit`), the log listed and read with Spark (:mod:`.files`, :mod:`.log`), every
py4j call (:mod:`.jvm`, which also finds the commit path a session allows: :func:`commit_path`) how a lost race
is recognised (:mod:`.conflicts`) and Delta's VACUUM (:mod:`.vacuum`).
"""

from lakeshard.lake.native.adapter import NATIVE_UNVERIFIED, NativeTableStore
from lakeshard.lake.native.jvm import CommitPath, commit_path

__all__ = ["NATIVE_UNVERIFIED", "CommitPath", "NativeTableStore", "commit_path"]
