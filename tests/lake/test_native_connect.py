"""The native adapter's public-API side under Spark Connect: log reads of delta-spark golden tables, and a
clear refusal of what needs Delta's internal API. (Checkpoints through Delta's public SQL need a session with
Delta's SQL extension: ``tests/maintenance/test_native_bookkeeping.py`` under the tests' Connect server.)

It runs in a child process with its own local Spark Connect server (``remote("local[1]")``), so the shared
classic session of the other tests is left alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "delta-golden"

_SCRIPT = r"""
import json, shutil, sys
from pyspark.sql import SparkSession
from lakeshard.errors import UnsupportedByAdapter
from lakeshard.lake.native import NativeTableStore

golden, tmp = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.remote("local[1]").getOrCreate()
out = {"session": type(spark).__module__}
store = NativeTableStore(spark)
for name in ("checkpoint", "multi-part-checkpoint", "deltalog-getChanges"):
    root = shutil.copytree(f"{golden}/{name}", f"{tmp}/{name}")
    out[name] = [store.version(root), len(store.files(root)), store.transaction_version(root, "fakeAppId")]
for name, call in (("table-with-columnmapping-mode-name", lambda r: store.files(r)),
                   ("checkpoint", lambda r: store.replace_files(r, ["15"], None))):
    root = f"{tmp}/refused-{len(out)}"
    shutil.copytree(f"{golden}/{name}", root)
    try:
        call(root)
        out[f"refused-{len(out)}"] = "not refused"
    except UnsupportedByAdapter as exc:
        out[f"refused-{len(out)}"] = str(exc)
spark.stop()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_native_log_reads_and_refusals_under_spark_connect(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(GOLDEN), str(tmp_path)], capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["session"] == "pyspark.sql.connect.session"
    assert out["checkpoint"] == [14, 1, None]
    assert out["multi-part-checkpoint"] == [1, 10, None]
    assert out["deltalog-getChanges"] == [2, 0, 3]
    refusals = [v for k, v in out.items() if k.startswith("refused-")]
    assert "columnMapping" in refusals[0]
    assert "needs Delta's internal transaction API (py4j)" in refusals[1]
