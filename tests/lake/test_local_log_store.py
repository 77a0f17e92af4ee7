"""Delta's log store for ``file:`` tables (scripts/delta-jars/src, built by ``make env``): two processes committing
to one local table at once each get a version of their own, and no commit file replaces another.

Delta's default for ``file:`` (``HDFSLogStore``) checks that the next commit file does not exist and then renames
onto it, atomically only within one JVM. Run through the race below (two store instances, released together for
each of 1,500 versions) it told a writer "committed" while the file held the other writer's commit in 16 versions,
and told both writers "committed" in one (docs/lake.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.lake import TableStore
from lakeshard.runtime import LOCAL_LOG_STORE_CLASS, LOCAL_LOG_STORE_JAR, delta_jars_folder, find_java

RACE = Path(__file__).with_name("LogStoreRace.java")
NO_LINKS = Path(__file__).with_name("LogStoreNoLinks.java")


def _java(source: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a Java source file (Java's source launcher) on Spark's and Delta's jars; fail on a non-zero exit."""
    import pyspark

    jars = os.pathsep.join([str(Path(pyspark.__file__).parent / "jars" / "*"), str(delta_jars_folder() / "*")])
    java, _ = find_java()
    done = subprocess.run([java, "-cp", jars, str(source), *args], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done


def _race(store_class: str, folder: Path, versions: int, writers: int) -> list[dict[str, object]]:
    """Run :data:`RACE` and return, per version, its winners and whose commit it holds."""
    folder.mkdir(parents=True)
    done = _java(RACE, store_class, str(folder), str(versions), str(writers))
    return json.loads(done.stdout.strip().splitlines()[-1])["versions"]


@pytest.fixture
def store_jar(delta_jars_installed: None) -> Path:
    jar = delta_jars_folder() / LOCAL_LOG_STORE_JAR
    assert jar.is_file(), f"make env builds {jar} with javac beside Delta's jars; it is missing"
    return jar


@pytest.mark.parametrize("writers", [2, 3])
def test_racing_writers_each_get_a_version_of_their_own_and_no_commit_replaces_another(
        store_jar: Path, writers: int, tmp_path: Path) -> None:
    versions = _race(LOCAL_LOG_STORE_CLASS, tmp_path / "_delta_log", 1500, writers)
    assert len(versions) == 1500
    won_twice = [v for v, r in enumerate(versions) if len(r["winners"]) != 1]
    replaced = [v for v, r in enumerate(versions) if r["winners"] != [r["file"]["writer"]]]
    assert (won_twice, replaced) == ([], [])
    assert {w for r in versions for w in r["winners"]} == set(range(writers))
    assert sorted(p.name for p in (tmp_path / "_delta_log").iterdir()) == [f"{v:020d}.json" for v in range(1500)]


def test_a_file_system_without_hard_links_still_commits_each_version_once_and_says_so(store_jar: Path,
                                                                                      tmp_path: Path) -> None:
    """Where the link step is refused (some network and FUSE mounts take no hard links), the store falls back to
    check-then-rename: a version is still written once and refused after, overwrites still land, no temporary file
    stays, and standard error says once that concurrent processes are not guarded there."""
    folder = tmp_path / "_delta_log"
    folder.mkdir()
    done = _java(NO_LINKS, str(folder), "20")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["written"], result["refused"]) == (20, 20)
    assert result["last_checkpoint"] == {"version": 1}
    assert [json.loads((folder / f"{v:020d}.json").read_text()) for v in range(20)] == \
        [{"version": v, "round": 0} for v in range(20)]
    expected = [*[f"{v:020d}.json" for v in range(20)], "_last_checkpoint"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(expected)  # no temporary file left
    warnings = [line for line in done.stderr.splitlines() if line.startswith("lakeshard:")]
    assert len(warnings) == 1 and "takes no hard links" in warnings[0], done.stderr


@pytest.mark.delta_jvm
def test_the_session_commits_file_tables_through_it(spark: SparkSession, native_store: TableStore, store_jar: Path,
                                                    tmp_path: Path) -> None:
    assert spark.conf.get("spark.delta.logStore.file.impl") == LOCAL_LOG_STORE_CLASS
    uri = f"file://{tmp_path / 't'}"
    spark.range(3).write.format("delta").save(uri)
    spark.range(2).write.format("delta").mode("append").save(uri)
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)
    delegate = log.store().getDelegate(jvm.org.apache.hadoop.fs.Path(uri))
    assert delegate.logStoreImpl().getClass().getName() == LOCAL_LOG_STORE_CLASS
    assert spark.read.format("delta").load(uri).count() == 5
    names = [p.name for p in (tmp_path / "t" / "_delta_log").iterdir()]
    assert sorted(n for n in names if n.endswith(".json")) == ["00000000000000000000.json", "00000000000000000001.json"]
    assert [n for n in names if n.endswith(".tmp")] == []  # each commit's temporary file is gone
