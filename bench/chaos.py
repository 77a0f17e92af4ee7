"""A seeded fault campaign: rounds of racing lakeshard processes under injected faults, invariants after each.

Each round the synthetic generator adds half an hour of landing files (with its truth), then 2-4 processes drawn
by seed race on the lakehouse — a fused ``lakeshard ingest``, ``route`` and the shard writers, ``buckets close``,
``compact --apply``, the hourly maintenance (``pipeline run`` of its flows) — while the round's faults strike
(:mod:`chaos_faults`). Every process ends, or is killed as a hang: past the engine's deadline and idle
(:data:`bench.chaos_faults.STALL_S`). A clean ``route`` and ``ingest`` settle the round; a damaged data file is
then cut, named by ``fsck``, repaired and refilled; ``fsck`` must then be clean and the invariants of
:mod:`chaos_check` hold.

Prints a line per round, then ``N faults: L lost, D duplicated, C closed buckets changed, H hangs``; exits 1 when an
invariant broke. Writes ``chaos.json``, ``chaos.md`` and ``chaos.png`` to ``--out`` (default bench/results/).

    .venv/bin/python -m bench.chaos --seed 1 --faults 300 --engines embedded,native,connect

The ``connect`` engine runs every process under Spark Connect against one local Connect server with Delta's engine
(the shape of serverless and databricks-connect), which the ``server_kill`` fault kills mid-round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.chaos_check import Ledger, check_round, closed_buckets, open_store
from bench.chaos_faults import (
    CLOCKSHIFT_SOURCE,
    FAILWRITES_SOURCE,
    FAULT_KINDS,
    KILL_SCALE,
    PROCESS_KINDS,
    ConnectServer,
    Engine,
    Racer,
    Zone,
    build_preload,
    damage_file,
    fill_disk,
    lakeshard,
    mount_tmpfs,
    mutate_landing,
    plan_then_kill,
    run_racers,
    unmount,
    wait_bounded,
)

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
START = datetime(2026, 1, 1, tzinfo=UTC)
CLOCKS = ("+2h", "-2h", "+1d", "-1d", "+10m", "-45m")
PROCESS_WEIGHTS = {"ingest": 4, "routed": 3, "close": 2, "compact": 2, "maintenance": 1}
FAULT_WEIGHTS = {"sigkill": 5, "disk_full": 2, "clock_jump": 2, "landing_rewrite": 1, "landing_truncate": 1,
                 "landing_remove": 1, "damaged_file": 2, "server_kill": 3, "write_fail": 2}
TMPFS_MIB = 384


def engines(names: list[str]) -> list[Engine]:
    """Return the engines named, each with its environment and bounds."""
    jars = os.environ.get("LAKESHARD_DELTA_JARS", str(ROOT / ".delta-jars"))
    known = {
        "embedded": Engine("embedded", {"LAKESHARD_SPARK_ADAPTER": "embedded"}, deadline=120.0, kill_window=2.5,
                           events=1500),
        "native": Engine("native", {"LAKESHARD_SPARK_ADAPTER": "native", "LAKESHARD_DELTA_JARS": jars},
                         deadline=300.0, kill_window=20.0, events=600),
        # Every process a client of the campaign's Connect server (its address added by the zone).
        "connect": Engine("connect", {"LAKESHARD_SPARK_ADAPTER": "native", "LAKESHARD_DELTA_JARS": jars},
                          deadline=300.0, kill_window=12.0, events=600),
    }
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise SystemExit(f"chaos: unknown engine(s) {unknown}; known: {sorted(known)}")
    return [known[n] for n in names]


def _run(zone: Zone, args: list[str], log: Path, *, classic: bool = False) -> tuple[int, str, bool]:
    """Return (exit code, output, hung) of one settling command (``classic``: in a classic session on any engine), a
    hang by the rule of :data:`bench.chaos_faults.STALL_S`."""
    with log.open("ab") as out:
        out.write(f"$ lakeshard {' '.join(args)}\n".encode())
    with tempfile.TemporaryFile() as captured:
        proc = subprocess.Popen(lakeshard(zone, *args), env=zone.env(classic=classic), stdout=captured,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            hung = wait_bounded(proc, zone.engine.deadline)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # what it left behind; and on an interrupted campaign, itself
            proc.wait()
        captured.seek(0)
        text = captured.read()
    output = text.decode(errors="replace")
    with log.open("ab") as out:
        out.write(output.encode() + f"(exit {proc.returncode})\n".encode())
    return proc.returncode, output, hung


def _draw_faults(rng: random.Random, left: int, available: list[str]) -> list[str]:
    count = min(left, rng.randint(2, 5))
    weights = [FAULT_WEIGHTS[k] for k in available]
    faults = rng.choices(available, weights, k=count)
    landing = [f for f in faults if f.startswith("landing_")]  # one landing mutation a round (one planned batch)
    return [f for f in faults if not f.startswith("landing_")] + landing[:1]


def play_round(zone: Zone, number: int, rng: random.Random, left: int, available: list[str], ledger: Ledger,
               seed: int, work: Path) -> dict[str, Any]:
    """Return the record of one round: its processes, its faults with their outcome, the invariants after it."""
    from lakeshard.synth import SynthSpec, generate_landing

    logs = work / "logs" / zone.engine.name / f"round-{number:03d}"
    logs.mkdir(parents=True, exist_ok=True)
    folder = zone.landing / f"round-{number:03d}"
    generate_landing(folder, SynthSpec(events=zone.engine.events, tenants=6, seed=seed * 1000 + number,
                                       start=START + timedelta(minutes=30 * number), hours=0.5))
    kinds = _draw_faults(rng, left, available)
    notes: list[str] = []
    faults: list[dict[str, Any]] = []
    hangs = 0
    for kind in kinds:
        if kind.startswith("landing_"):
            planned = plan_then_kill(zone, logs)
            name = mutate_landing(folder, kind.removeprefix("landing_"), rng)
            if kind == "landing_rewrite":
                ledger.rewritten.add(name)
            faults.append({"kind": kind, "detail": f"{name} after {'a planned batch' if planned else 'a run'}"})
    racers = [Racer(k) for k in rng.choices(PROCESS_KINDS, [PROCESS_WEIGHTS[k] for k in PROCESS_KINDS],
                                             k=rng.randint(2, 4 if zone.engine.name == "embedded" else 3))]
    disk = server_kill = None
    for kind in kinds:
        if kind == "sigkill":
            racer = rng.choice([r for r in racers if r.kill_after is None] or racers)
            racer.kill_after = round(rng.uniform(0.2, zone.engine.kill_window * KILL_SCALE[racer.kind]), 2)
            faults.append({"kind": kind, "racer": racer})
        elif kind == "clock_jump":
            racer = rng.choice(racers)
            racer.clock = rng.choice(CLOCKS)
            racer.clock_after = round(rng.uniform(0.2, zone.engine.kill_window * KILL_SCALE[racer.kind] / 2), 2)
            racer.clock_back = round(rng.uniform(1.0, zone.engine.kill_window), 2)
            faults.append({"kind": kind, "clocked": racer})
        elif kind == "write_fail":
            racer = rng.choice([r for r in racers if r.writes_fail_after is None] or racers)
            span = zone.engine.kill_window * KILL_SCALE[racer.kind]
            racer.writes_fail_after = round(rng.uniform(0.2, span / 2), 2)
            # A disk that fails for a moment, or from then on (the process must end on its own with an error).
            racer.writes_fail_for = round(rng.choice([rng.uniform(0.5, span), 3600.0]), 2)
            faults.append({"kind": kind, "failing": racer})
        elif kind == "disk_full" and disk is None:
            after, hold = rng.uniform(0.0, zone.engine.kill_window / 2), rng.uniform(0.5, 5.0)
            disk = fill_disk(zone.lakehouse, after, hold)
            faults.append({"kind": kind, "detail": f"full at {after:.1f}s for {hold:.1f}s"})
        elif kind == "server_kill" and server_kill is None and zone.server is not None:
            after = round(rng.uniform(1.0, zone.engine.kill_window), 2)
            server_kill = zone.server.kill_after(after)
            faults.append({"kind": kind, "server_after": after})
    run_racers(zone, racers, logs)
    if disk is not None:
        disk.join()
    if server_kill is not None:
        server_kill.join()
    if zone.server is not None and zone.server.ensure_up() and server_kill is None:
        notes.append("the Connect server had died without a fault aimed at it; started again")
    hangs += sum(r.hung for r in racers)
    for fault in faults:
        if "racer" in fault:
            racer = fault.pop("racer")
            fault["detail"] = f"{racer.kind} at {racer.kill_after}s" + ("" if racer.killed else " (had ended)")
            fault["landed"] = racer.killed
        if "clocked" in fault:  # the jump happened only if the process still ran then
            racer = fault.pop("clocked")
            fault["landed"] = racer.seconds > racer.clock_after
            fault["detail"] = f"{racer.kind} {racer.clock} at {racer.clock_after}s, back {racer.clock_back}s later" + (
                "" if fault["landed"] else " (had ended)")
        if "failing" in fault:  # it struck only if a write of the process was failed
            racer = fault.pop("failing")
            fault["landed"] = racer.writes_failed
            until = "its end" if racer.writes_fail_for >= 3600 else f"{racer.writes_fail_for}s"
            fault["detail"] = (f"{racer.kind} from {racer.writes_fail_after}s for {until} (exit {racer.returncode})"
                               + ("" if racer.writes_failed else " (no write fell in the window)"))
        if "server_after" in fault:  # the kill struck a client only if one still ran then
            after = fault.pop("server_after")
            fault["landed"] = any(r.seconds > after for r in racers)
            fault["detail"] = f"at {after}s" + ("" if fault["landed"] else " (every process had ended)")

    settle = logs / "settle.log"
    zone.wait_settled()
    for args in (["route"], ["ingest"]):
        rc, out, hung = _run(zone, [*args, "--lakehouse", str(zone.lakehouse), "--landing", str(zone.landing)], settle)
        hangs += hung
        if rc != 0:  # once more: a commit conflict with nothing racing any more is a failure
            rc, out, hung = _run(zone, [*args, "--lakehouse", str(zone.lakehouse), "--landing", str(zone.landing)],
                                 settle)
            hangs += hung
            if rc != 0:
                notes.append(f"settling {args[0]} failed: {out.strip().splitlines()[-1:] }")
    unnamed = 0
    if "damaged_file" in kinds:
        store, cfg = open_store(zone.lakehouse)
        table = rng.choice(["events", "routed", "event_ids"])
        cut = damage_file(store, cfg, table, set(closed_buckets(store, cfg)), rng)  # closed now: refill refuses
        detail = {"kind": "damaged_file", "detail": f"{table}: no file to damage"}
        if cut is not None:
            path, refill = cut
            rc, out, hung = _run(zone, ["fsck", "--lakehouse", str(zone.lakehouse)], settle)
            named = Path(path).name in out and rc == 1
            unnamed += not named
            # Under Spark Connect the repair is refused (it removes exact files: Delta's internal API); a user runs it
            # from a classic session, as its error says.
            _run(zone, ["fsck", "--lakehouse", str(zone.lakehouse), "--repair"], settle, classic=True)
            rc_refill, out_refill, _ = _run(zone, ["refill", "--lakehouse", str(zone.lakehouse), refill], settle)
            _run(zone, ["ingest", "--lakehouse", str(zone.lakehouse), "--landing", str(zone.landing)], settle)
            detail = {"kind": "damaged_file", "detail": f"{table} {Path(path).name} ({refill}); fsck "
                      f"{'named it' if named else 'did NOT name it'}; refill exit {rc_refill}"}
            if rc_refill != 0:
                notes.append(f"refill {refill} exit {rc_refill}: {out_refill.strip().splitlines()[-1:]}")
        faults.append(detail)
    rc_fsck, out_fsck, hung = _run(zone, ["fsck", "--lakehouse", str(zone.lakehouse)], settle)
    hangs += hung
    if rc_fsck != 0:
        notes.append(f"fsck not clean after the round: {out_fsck.strip().splitlines()[-2:]}")
    check = check_round(zone.lakehouse, zone.landing, ledger)
    broken = check.broken or bool(hangs) or bool(unnamed) or rc_fsck != 0
    for fault in faults:
        fault.setdefault("landed", True)
        fault["outcome"] = "broke" if broken else "held"
    return {"round": number, "engine": zone.engine.name, "processes": [r.describe() for r in racers],
            "faults": faults, "hangs": hangs, "fsck_clean": rc_fsck == 0,
            "hung_output": {r.describe(): r.stderr_tail for r in racers if r.hung},  # where a hang stood
            "unnamed_damage": unnamed, "check": check.as_dict(), "broken": broken, "notes": notes}


def campaign(engine: Engine, faults: int, seed: int, work: Path, say: Any, minutes: float = 0.0,
             kinds: Sequence[str] = FAULT_KINDS, on_round: Callable[[dict[str, Any]], None] | None = None
             ) -> dict[str, Any]:
    """Return the rounds of one engine's campaign of ``faults`` landed faults of ``kinds`` (those that apply to the
    engine; fewer faults when ``minutes`` runs out first: no round starts after it). ``on_round`` gets the run so far
    after every round (a campaign stopped or broken midway keeps what it did)."""
    rng = random.Random(f"{seed}-{engine.name}")
    root = work / engine.name
    clock_lib, no_clock = build_preload(work, CLOCKSHIFT_SOURCE) if "clock_jump" in kinds else (None, "")
    # Under Spark Connect the server writes the files, not the racing clients: failing writes apply elsewhere.
    write_lib, no_write = (build_preload(work, FAILWRITES_SOURCE) if "write_fail" in kinds and engine.name != "connect"
                           else (None, ""))
    zone = Zone(root, engine, ConnectServer() if engine.name == "connect" else None, clock_lib, write_lib)
    mounted = mount_tmpfs(zone.lakehouse, TMPFS_MIB)
    available = [k for k in ("sigkill", "clock_jump", "landing_rewrite", "landing_truncate", "landing_remove",
                             "damaged_file", "server_kill", "write_fail")
                 if k in kinds and (k != "clock_jump" or clock_lib is not None)
                 and (k != "server_kill" or zone.server is not None) and (k != "write_fail" or write_lib is not None)]
    if mounted and "disk_full" in kinds:
        available.append("disk_full")
    if not available:
        raise SystemExit(f"chaos: none of the fault kinds {list(kinds)} applies to the {engine.name} engine here")
    left_out = {"disk_full": "no tmpfs could be mounted (needs root)"} if not mounted else {}
    if no_clock:
        left_out["clock_jump"] = no_clock
    if no_write:
        left_out["write_fail"] = no_write
    elif "write_fail" in kinds and engine.name == "connect":
        left_out["write_fail"] = "under Spark Connect the server writes the lakehouse's files, not the racing clients"
    ledger, rounds, landed = Ledger(), [], 0
    started = time.monotonic()

    def run() -> dict[str, Any]:
        return {"engine": engine.name, "rounds": rounds, "seconds": round(time.monotonic() - started, 1),
                "faults": landed, "faults_asked": faults, "tmpfs_mib": TMPFS_MIB if mounted else None,
                "left_out": left_out}

    try:
        if zone.server is not None:
            zone.server.ensure_up()
        while landed < faults and not (minutes and time.monotonic() - started > minutes * 60):
            record = play_round(zone, len(rounds), rng, faults - landed, available, ledger, seed, work)
            rounds.append(record)
            landed += sum(f["landed"] for f in record["faults"])
            c = record["check"]
            say(f"{engine.name} round {record['round']:3d}: {', '.join(record['processes'])} | "
                f"{'; '.join(f['kind'] + ' ' + f.get('detail', '') for f in record['faults'])} | "
                f"{c['events']} events / {c['expected']} expected, lost {c['lost']}, dup {c['duplicated']}, "
                f"closed {c['closed']} (changed {c['closed_changed']}), hangs {record['hangs']}"
                f"{' BROKEN ' + str(record['notes'] + c['examples']) if record['broken'] else ''}")
            if on_round is not None:
                on_round(run())
    finally:
        if zone.server is not None:
            zone.server.stop()
        if mounted:
            unmount(zone.lakehouse)
    return run()


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the totals of the campaign: faults, lost, duplicated, closed buckets changed, hangs, per kind."""
    kinds: Counter[tuple[str, str, str]] = Counter()
    totals = Counter[str]()
    for run in runs:
        for r in run["rounds"]:
            for f in r["faults"]:
                outcome = f["outcome"] if f["landed"] else "missed (the process had ended)"
                kinds[(run["engine"], f["kind"], outcome)] += 1
            # An event lost (or doubled) at one check and still so at the next is counted once; records of campaigns
            # from before the ledger kept them count per round.
            totals["lost"] += r["check"].get("lost_new", r["check"]["lost"])
            totals["duplicated"] += r["check"].get("duplicated_new", r["check"]["duplicated"]) + r["check"]["invented"]
            totals["closed_changed"] += r["check"]["closed_changed"]
            totals["hangs"] += r["hangs"]
            totals["quarantine_repeated"] += r["check"]["quarantine_repeated"]
            totals["unnamed_damage"] += r["unnamed_damage"]
            totals["broken_rounds"] += r["broken"]
    faults = sum(run["faults"] for run in runs)
    line = (f"{faults} faults: {totals['lost']} lost, {totals['duplicated']} duplicated, "
            f"{totals['closed_changed']} closed buckets changed, {totals['hangs']} hangs")
    return {"faults": faults, **totals, "line": line,
            "kinds": [{"engine": e, "kind": k, "outcome": o, "count": n} for (e, k, o), n in sorted(kinds.items())]}


def write_results(out: Path, args: argparse.Namespace, runs: list[dict[str, Any]], summary: dict[str, Any],
                  *, complete: bool = True) -> None:
    """Write chaos.json, chaos.md and chaos.png into ``out`` (``complete=False``: the rounds so far of a campaign
    still running, or stopped midway)."""
    out.mkdir(parents=True, exist_ok=True)
    meta = {"seed": args.seed, "faults_asked": args.faults, "engines": args.engines,
            "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "machine": platform.platform(),
            "cpus": os.cpu_count(), "complete": complete}
    per_engine = [{"engine": r["engine"], "faults": r["faults"], "rounds": len(r["rounds"]), "seconds": r["seconds"],
                   "seconds_per_fault": round(r["seconds"] / max(r["faults"], 1), 1), "left_out": r["left_out"]}
                  for r in runs]
    (out / "chaos.json").write_text(json.dumps({"meta": meta, "summary": summary, "engines": per_engine,
                                                "runs": runs}, indent=1, default=str) + "\n")
    lines = ["# Fault campaign (bench/chaos.py)", "",
             f"Seed {args.seed}, {summary['faults']} faults landed on {args.engines}, {meta['when']}, "
             f"{meta['cpus']} CPUs. Run with `make chaos SEED={args.seed} FAULTS={args.faults} "
             f"ENGINES={args.engines}`.", "", f"**{summary['line']}**", "",
             *([] if complete else ["Partial: the rounds done when the campaign stopped (or so far).", ""]),
             f"Rounds broken: {summary['broken_rounds']}; quarantine rows repeated: {summary['quarantine_repeated']}; "
             f"damaged files fsck did not name: {summary['unnamed_damage']}.", "",
             "| engine | faults | rounds | seconds | seconds per fault | left out |", "|---|---:|---:|---:|---:|---|"]
    lines += [f"| {e['engine']} | {e['faults']} | {e['rounds']} | {e['seconds']} | {e['seconds_per_fault']} | "
              f"{'; '.join(f'{k}: {v}' for k, v in e['left_out'].items()) or '-'} |" for e in per_engine]
    lines += ["", "| engine | fault | outcome | count |", "|---|---|---|---:|"]
    lines += [f"| {k['engine']} | {k['kind']} | {k['outcome']} | {k['count']} |" for k in summary["kinds"]]
    broken = [r for run in runs for r in run["rounds"] if r["broken"]]
    if broken:
        lines += ["", "## Broken rounds", ""]
        lines += [f"- {r['engine']} round {r['round']}: {r['processes']}, faults "
                  f"{[f['kind'] + ' ' + f.get('detail', '') for f in r['faults']]}: {r['notes']} "
                  f"{r['check']['examples']}" for r in broken]
    (out / "chaos.md").write_text("\n".join(lines) + "\n")
    _plot(out / "chaos.png", summary)


def _plot(path: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = sorted({(k["engine"], k["kind"]) for k in summary["kinds"]})
    outcomes = sorted({k["outcome"] for k in summary["kinds"]})
    colors = {"held": "#4c9a2a", "broke": "#c0392b"}
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(bars) + 2), 4))
    bottom = [0] * len(bars)
    for outcome in outcomes:
        heights = [sum(k["count"] for k in summary["kinds"] if (k["engine"], k["kind"]) == b and
                       k["outcome"] == outcome) for b in bars]
        ax.bar(range(len(bars)), heights, bottom=bottom, label=outcome, color=colors.get(outcome, "#999999"))
        bottom = [a + b for a, b in zip(bottom, heights, strict=True)]
    ax.set_xticks(range(len(bars)), [f"{e}\n{k}" for e, k in bars], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("faults")
    ax.set_title(summary["line"], fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=30, help="faults to land, over all engines")
    parser.add_argument("--engines", default="embedded",
                        help="comma-separated: embedded, native (classic session), connect (under Spark Connect)")
    parser.add_argument("--native-share", type=float, default=0.2,
                        help="share of the faults aimed at Delta's engine (native and connect, split evenly) when "
                             "the embedded one runs too (its rounds are slower)")
    parser.add_argument("--kinds", default=",".join(FAULT_KINDS),
                        help=f"comma-separated fault kinds to draw from (default all: {', '.join(FAULT_KINDS)})")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the campaign's folder (lakehouses, logs)")
    parser.add_argument("--minutes", type=float, default=0.0,
                        help="start no round after this many minutes per engine (0: no bound)")
    parser.add_argument("--merge", type=Path, nargs="+", default=[],
                        help="write the results of these chaos.json files (campaigns run apart) as one, run nothing")
    args = parser.parse_args(argv)
    if args.merge:
        docs = [json.loads(p.read_text()) for p in args.merge]
        merged = [run for d in docs for run in d["runs"]]
        args.engines = ",".join(r["engine"] for r in merged)
        args.faults = sum(d["meta"]["faults_asked"] for d in docs)
        summary = summarize(merged)
        write_results(args.out, args, merged, summary, complete=all(d["meta"].get("complete", True) for d in docs))
        print(summary["line"])
        return 1 if summary["broken_rounds"] else 0
    names = [n.strip() for n in args.engines.split(",") if n.strip()]
    chosen = engines(names)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if unknown := sorted(set(kinds) - set(FAULT_KINDS)):
        raise SystemExit(f"chaos: unknown fault kind(s) {unknown}; known: {', '.join(FAULT_KINDS)}")
    slow = [n for n in names if n != "embedded"]
    if "embedded" in names and slow:
        shares = {n: max(1, round(args.faults * args.native_share / len(slow))) for n in slow}
    else:  # Delta's engines alone (or one engine): the faults split evenly
        shares = {n: max(1, round(args.faults / len(names))) for n in names}
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stopped campaign unmounts and kills its processes
    work = Path(tempfile.mkdtemp(prefix="lakeshard-chaos-"))
    runs: list[dict[str, Any]] = []

    def so_far(run: dict[str, Any]) -> None:
        write_results(args.out, args, [*runs, run], summarize([*runs, run]), complete=False)

    try:
        for engine in chosen:
            n = shares.get(engine.name, args.faults - sum(shares.values()))
            runs.append(campaign(engine, n, args.seed, work, lambda s: print(s, flush=True), args.minutes, kinds,
                                 so_far))
    finally:
        if args.keep:
            print(f"campaign folder kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(runs)
    write_results(args.out, args, runs, summary)
    print(summary["line"])
    return 1 if summary["broken_rounds"] else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("chaos: interrupted; its processes killed, its tmpfs unmounted; the rounds it finished are in the "
              "results (--out), marked partial", file=sys.stderr)
        sys.exit(130)
