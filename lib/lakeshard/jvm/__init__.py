"""Tuning of the local Spark JVM lakeshard starts: Java's class-data archive of Spark's classes (:mod:`.classdata`)
and py4j's replies without Nagle's wait (:mod:`.replies`). The session factory (:mod:`lakeshard.runtime`) and the
native adapter's JVM calls use them; nothing here starts a session."""

from __future__ import annotations

from lakeshard.jvm.classdata import archive_options, archive_path, java_executable, make_archive
from lakeshard.jvm.replies import quick_replies

__all__ = ["archive_options", "archive_path", "java_executable", "make_archive", "quick_replies"]
