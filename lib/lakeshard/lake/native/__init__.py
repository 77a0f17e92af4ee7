"""The native adapter (Delta's own JVM engine through delta-spark): :class:`NativeTableStore`.

Its modules: the adapter (:mod:`.adapter`), Delta's public writer (:mod:`.public`), commits through Delta's
internal transaction (:mod:`.commit`), the log listed and read with Spark (:mod:`.files`, :mod:`.log`), every
py4j call (:mod:`.jvm`) and how a lost race is recognised (:mod:`.conflicts`).
"""

from lakeshard.lake.native.adapter import NATIVE_UNVERIFIED, NativeTableStore

__all__ = ["NATIVE_UNVERIFIED", "NativeTableStore"]
