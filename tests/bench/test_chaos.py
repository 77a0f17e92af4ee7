"""The fault campaign (bench/chaos.py): fixed seeds hold every invariant, and its checker catches a lost, a
duplicated and a changed closed bucket's event made behind its back."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from bench import chaos, chaos_check, chaos_faults

LINE = re.compile(r"^(\d+) faults: (\d+) lost, (\d+) duplicated, (\d+) closed buckets changed, (\d+) hangs$")


def _campaign(tmp_path: Path, *args: str) -> dict[str, object]:
    code = chaos.main([*args, "--out", str(tmp_path)])
    results = json.loads((tmp_path / "chaos.json").read_text())
    assert code == 0, (tmp_path / "chaos.md").read_text()
    return dict(results)


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "kinds"), [(11, ",".join(chaos_faults.FAULT_KINDS)),
                                             (12, ",".join(chaos_faults.FAULT_KINDS)), (14, "write_fail")])
def test_a_fixed_seed_lands_its_faults_and_every_invariant_holds(tmp_path: Path, seed: int, kinds: str) -> None:
    results = _campaign(tmp_path, "--seed", str(seed), "--faults", "3", "--engines", "embedded", "--kinds", kinds)
    summary = results["summary"]
    assert isinstance(summary, dict)
    got = LINE.match(summary["line"])
    assert got is not None, summary["line"]
    assert int(got[1]) >= 3 and got.groups()[1:] == ("0", "0", "0", "0"), summary["line"]
    assert summary["broken_rounds"] == 0 and summary["unnamed_damage"] == 0
    md = (tmp_path / "chaos.md").read_text()
    assert summary["line"] in md and (tmp_path / "chaos.png").stat().st_size > 0
    assert sum(k["count"] for k in summary["kinds"] if not k["outcome"].startswith("missed")) == int(got[1])


@pytest.mark.slow
@pytest.mark.delta_jvm
def test_a_round_on_deltas_engine_holds_every_invariant(tmp_path: Path, delta_jars_installed: None) -> None:
    results = _campaign(tmp_path, "--seed", "21", "--faults", "1", "--engines", "native")
    summary = results["summary"]
    assert isinstance(summary, dict)
    assert summary["line"].endswith(": 0 lost, 0 duplicated, 0 closed buckets changed, 0 hangs"), summary["line"]
    assert summary["faults"] >= 1 and summary["broken_rounds"] == 0


@pytest.mark.slow
def test_the_checker_counts_events_lost_duplicated_and_closed_buckets_changed_behind_its_back(tmp_path: Path) -> None:
    import deltalake

    from lakeshard.synth import SynthSpec, generate_landing

    zone = chaos_faults.Zone(tmp_path, chaos.engines(["embedded"])[0])
    generate_landing(zone.landing / "round-000", SynthSpec(events=300, tenants=3, seed=5, hours=0.5))
    lh, land = ["--lakehouse", str(zone.lakehouse)], ["--landing", str(zone.landing)]
    for args in (["ingest", *lh, *land], ["buckets", "close", *lh, *land, "--quiet-minutes", "0",
                                          "--grace-minutes", "0"]):
        subprocess.run(chaos_faults.lakeshard(zone, *args), env=zone.env(), check=True, capture_output=True)
    ledger = chaos_check.Ledger()
    clean = chaos_check.check_round(zone.lakehouse, zone.landing, ledger)
    assert (clean.lost, clean.duplicated, clean.closed_changed, clean.events) == (0, 0, 0, 300), clean
    assert clean.closed > 1 and not clean.broken

    store, cfg = chaos_check.open_store(zone.lakehouse)
    uri = cfg.table_uri("events")
    rows = store.read_table_arrow(uri)
    buckets = sorted(set(zip(rows.column("tenant_id").to_pylist(), rows.column("hour").to_pylist(), strict=True)))
    first, second = buckets[0], buckets[-1]
    index = list(zip(rows.column("tenant_id").to_pylist(), rows.column("hour").to_pylist(), strict=True))
    doubled = rows.slice(index.index(first), 1)
    gone = rows.column("event_id")[index.index(second)].as_py()
    deltalake.write_deltalake(uri, pa.Table.from_batches(doubled.to_batches(), schema=doubled.schema), mode="append")
    deltalake.DeltaTable(uri).delete(f"event_id = '{gone}' AND tenant_id = '{second[0]}'")

    broken = chaos_check.check_round(zone.lakehouse, zone.landing, ledger)
    assert (broken.lost, broken.duplicated, broken.closed_changed) == (1, 1, 2), broken
    assert (broken.lost_new, broken.duplicated_new) == (1, 1), broken
    assert broken.broken and any("lost" in e for e in broken.examples)
    # Still broken at the next check, but the same event: a campaign counts it once.
    again = chaos_check.check_round(zone.lakehouse, zone.landing, ledger)
    assert (again.lost, again.duplicated, again.lost_new, again.duplicated_new) == (1, 1, 0, 0), again


def test_the_campaign_script_and_its_make_target_agree() -> None:
    makefile = (Path(chaos.__file__).resolve().parents[1] / "Makefile").read_text()
    assert "-m bench.chaos --seed $(SEED) --faults $(FAULTS) --engines $(ENGINES)" in makefile
    assert re.search(r"^\.PHONY:.* chaos ", makefile, re.M)


def test_a_process_past_its_deadline_is_a_hang_when_idle_not_when_busy() -> None:
    """The campaign's hang rule on real processes: one asleep past its deadline is a hang (killed at once after
    the idle spell); one that computes past its deadline and then ends is slow, not hung; one that computes past
    the runaway bound is a hang however busy."""
    import sys
    import time

    def start(code: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)

    began = time.monotonic()
    assert chaos_faults.wait_bounded(start("import time; time.sleep(60)"), 0.5, stall_s=1.5, runaway=100)
    assert time.monotonic() - began < 30
    busy = "import time\nt = time.time()\nwhile time.time() - t < {}: pass"
    # A busy process gets CPU within any 5 s even on a loaded machine: it is slow, not idle.
    assert not chaos_faults.wait_bounded(start(busy.format(4)), 0.5, stall_s=5, runaway=100)
    assert chaos_faults.wait_bounded(start(busy.format(60)), 0.5, stall_s=5, runaway=6)


def test_a_clock_jump_steps_the_wall_clock_there_and_back_mid_run_leaving_monotonic_time_and_sleep(
    tmp_path: Path
) -> None:
    """The campaign's clock jump, on a real process and a child it starts: the wall clock (Python's and the child's)
    steps ahead at the moment set and back at the next, while the monotonic clock runs on and ``time.sleep`` works
    (libfaketime, used before, failed ``time.sleep`` with EINVAL: the jump tested that failure instead)."""
    import os
    import sys
    import time

    lib, why = chaos_faults.build_preload(tmp_path, chaos_faults.CLOCKSHIFT_SOURCE)
    assert lib is not None, why
    code = ("import subprocess, time\n"
            "for _ in range(18):\n"
            "    child = subprocess.run(['date', '+%s'], capture_output=True, text=True).stdout.strip()\n"
            "    print(time.time(), time.monotonic(), child, flush=True)\n"
            "    time.sleep(0.5)\n")
    at = time.monotonic() + 3.0  # the child reads its unshifted clock first
    env = {**os.environ, "LD_PRELOAD": str(lib), "CLOCKSHIFT": f"{at:.3f}:-7200,{at + 3.0:.3f}:0"}
    before = time.time()
    lines = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                           timeout=60).stdout.split()
    rows = [(float(lines[i]), float(lines[i + 1]), int(lines[i + 2])) for i in range(0, len(lines), 3)]
    shift = [round((wall - (before + (mono - rows[0][1]))) / 3600) for wall, mono, _ in rows]
    assert shift[0] == 0 and -2 in shift and shift[-1] == 0, shift  # there and back, in this order
    assert shift.index(-2) < len(shift) - 1 - shift[::-1].index(0)
    assert all(abs(round((child - wall) / 3600)) == 0 for wall, _, child in rows)  # the child's clock steps too
    monotonic = [mono for _, mono, _ in rows]
    assert all(0.4 < b - a < 60 for a, b in itertools.pairwise(monotonic))  # sleeps of 0.5 s each


def test_failing_writes_tear_the_first_then_fail_in_their_window_under_their_folder_only(tmp_path: Path) -> None:
    """The campaign's failing file system, on a real process and the JVM it starts: before the window every write
    lands; in it, a write to a file under the folder is torn (half its bytes land, the rest fails) and every later
    one fails with the errno asked for, fsync too, while files elsewhere are written whole; the mark says it struck."""
    import errno
    import os
    import sys
    import time

    lib, why = chaos_faults.build_preload(tmp_path, chaos_faults.FAILWRITES_SOURCE)
    assert lib is not None, why
    folder, elsewhere = tmp_path / "lakehouse", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    code = ("import os, subprocess, sys, time\n"
            "folder, elsewhere = sys.argv[1], sys.argv[2]\n"
            "open(folder + '/before', 'wb').write(b'b' * 5000)\n"
            "time.sleep(2.5)\n"
            "def attempt(path, data):\n"
            "    try:\n"
            "        with open(path, 'wb') as f:\n"
            "            f.write(data)\n"
            "            f.flush()\n"
            "            os.fsync(f.fileno())\n"
            "        return 'ok'\n"
            "    except OSError as e:\n"
            "        return e.errno\n"
            "print(attempt(folder + '/torn', b't' * 10000), attempt(folder + '/second', b's' * 10000),\n"
            "      attempt(elsewhere + '/whole', b'w' * 10000), flush=True)\n"
            "print(subprocess.run(['java', elsewhere + '/W.java', folder + '/jvm'], capture_output=True, text=True)"
            ".stdout.strip())\n")
    at = time.monotonic() + 2.0
    env = {**os.environ, "LD_PRELOAD": str(lib), "FAILWRITES": f"{at:.3f}:{at + 60:.3f}:{folder.resolve()}",
           "FAILWRITES_ERRNO": str(errno.ENOSPC), "FAILWRITES_MARK": str(tmp_path / "struck")}
    (elsewhere / "W.java").write_text(
        "import java.io.*; public class W { public static void main(String[] a) {"
        " try (FileOutputStream f = new FileOutputStream(a[0])) { f.write(new byte[1000]);"
        " System.out.println(\"ok\"); }"
        " catch (IOException e) { System.out.println(e.getMessage()); } } }")
    assert not (tmp_path / "struck").exists()
    done = subprocess.run([sys.executable, "-c", code, str(folder), str(elsewhere)], env=env, capture_output=True,
                          text=True, timeout=120)
    lines = done.stdout.split("\n")
    assert lines[0].split() == [str(errno.ENOSPC)] * 2 + ["ok"], done
    assert (folder / "before").stat().st_size == 5000 and (elsewhere / "whole").stat().st_size == 10000
    assert (folder / "torn").read_bytes() == b"t" * 5000  # half of the torn write, nothing of the rest
    assert (folder / "second").stat().st_size == 0
    assert (tmp_path / "struck").exists()
    assert lines[1] == os.strerror(errno.ENOSPC), done  # the JVM's writes fail too (Java 17 comes with make env)
    assert (folder / "jvm").stat().st_size == 500


@pytest.mark.slow
def test_a_campaign_stopped_midway_keeps_the_rounds_it_finished(tmp_path: Path) -> None:
    # A long campaign stopped (SIGTERM, an interrupted session) or broken midway wrote nothing before: its rounds
    # are now written after each one, marked partial.
    import signal
    import sys
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "bench.chaos", "--seed", "13", "--faults", "500", "--engines",
                             "embedded", "--kinds", "sigkill", "--out", str(out)], cwd=Path(chaos.__file__).parents[1],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not (out / "chaos.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    results = json.loads((out / "chaos.json").read_text())
    assert results["meta"]["complete"] is False and results["runs"][0]["rounds"], results["meta"]
    assert 0 < results["summary"]["faults"] < 500
    assert "Partial" in (out / "chaos.md").read_text()
