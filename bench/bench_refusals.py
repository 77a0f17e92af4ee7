"""Parse CPU of a landing zone by the share of its lines that only Arrow's JSON reader refuses.

Such lines (a trailing comma, a duplicate key, ``NaN``, an integer beyond 64 bits, a raw control character:
:func:`lakeshard.synth.malformed.arrow_refused_line`) pass the vectorised parse's type screen, so Arrow's reader
finds them one at a time. Each share of them gets one generated zone (``--lines`` lines in files of
``--file-lines``; the rest valid events of every ``ts`` form) and three parses of it:

* ``lakeshard`` — :func:`lakeshard.landing.parse_landing_arrow`, as ``lakeshard ingest`` runs it;
* ``lakeshard, Arrow finds every refusal`` — the same with its switch to the exact rules where refusals are dense
  turned off (``arrow_json._DENSE``): what finding every refused line through Arrow costs;
* ``exact rules on every line`` — the same with the vectorised block parse accepting nothing, so every line goes
  through :meth:`lakeshard.landing.parse.RecordParser.check` and its rows are built one by one: what a
  line-by-line parser with these rules and this output costs, and what the switch for dense refusals goes to.

CPU is the ``process_time`` of the best of ``--repeat`` runs after an untimed one (one parsing thread).
The three must agree on every line's outcome (events and quarantine counts are checked). Writes
``bench/results/refusals.{json,md,png}``.

    .venv/bin/python -m bench.bench_refusals [--lines 100000] [--shares 0,0.001,0.01,0.05,0.3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from lakeshard.config import LandingConfig
from lakeshard.landing import arrow_json, list_landing_files, parse_landing_arrow
from lakeshard.synth.malformed import arrow_refused_line, base_record

RESULTS = Path(__file__).resolve().parent / "results"
NOW_MS = 1_767_225_600_000 + 3 * 86_400_000  # a fixed clock: the zone's events are inside the accepted range
SHARES = (0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3)
CASES = ("lakeshard", "arrow-only", "exact")
NAMES = {"lakeshard": "lakeshard", "arrow-only": "lakeshard, Arrow finds every refusal",
         "exact": "exact rules on every line"}


def write_zone(root: Path, lines: int, file_lines: int, share: float, seed: int) -> int:
    """Write ``lines`` lines under ``root`` (``share`` of them Arrow-refused) and return the zone's bytes."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    for i in range(lines):
        ts_ms = NOW_MS - 86_400_000 + int(rng.integers(0, 86_400_000))
        tenant = f"t{i % 7}"
        out.append(arrow_refused_line(rng, tenant, ts_ms) if rng.random() < share
                   else json.dumps(base_record(rng, tenant, ts_ms), separators=(",", ":")))
    root.mkdir(parents=True, exist_ok=True)
    size = 0
    for n, lo in enumerate(range(0, lines, file_lines)):
        data = ("\n".join(out[lo:lo + file_lines]) + "\n").encode()
        (root / f"part-{n:04d}.jsonl").write_bytes(data)
        size += len(data)
    return size


def _lakeshard(root: Path, limits: LandingConfig) -> tuple[int, int]:
    events, quarantine = parse_landing_arrow(list_landing_files(root), limits=limits, now_ms=NOW_MS, threads=1)
    return events.num_rows, quarantine.num_rows


def _every_line_exact(self: arrow_json.BlockParser, text: bytes, starts: Any, ends: Any, numbers: Any
                      ) -> arrow_json.ParsedBlock:
    """A block parse that accepts nothing: every line goes to the exact rules."""
    return arrow_json.ParsedBlock({}, np.arange(len(starts), dtype=np.int64))


def _best(run: Callable[[], tuple[int, int]], repeat: int) -> tuple[float, tuple[int, int]]:
    """Return the least CPU of ``repeat`` runs after one untimed run (imports, compiled patterns), and the result."""
    got = run()
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        got = run()
        best = min(best, time.process_time() - start)
    return best, got


def measure(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    limits = LandingConfig()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="refusals-") as tmp:
        for k, share in enumerate(args.shares):
            root = Path(tmp) / f"share-{k}"
            size = write_zone(root, args.lines, args.file_lines, share, seed=k)
            row: dict[str, Any] = {"share": share, "zone_mb": round(size / 1e6, 2)}
            outcomes = {}
            dense, block_parse = arrow_json._DENSE, arrow_json.BlockParser.parse
            for case in CASES:
                if case == "arrow-only":
                    arrow_json._DENSE = (1 << 30, 0)
                elif case == "exact":
                    arrow_json.BlockParser.parse = _every_line_exact  # type: ignore[method-assign]
                try:
                    cpu, outcomes[case] = _best(lambda root=root: _lakeshard(root, limits), args.repeat)
                finally:
                    arrow_json._DENSE, arrow_json.BlockParser.parse = dense, block_parse  # type: ignore[method-assign]
                row[f"{case}_cpu_s"] = round(cpu, 3)
            if len(set(outcomes.values())) != 1:
                raise SystemExit(f"share {share}: the parses disagree (events, quarantined): {outcomes}")
            row["events"], row["quarantined"] = outcomes["exact"]
            rows.append(row)
            say(f"share {share:.3f}: " + ", ".join(f"{c} {row[f'{c}_cpu_s']:.2f} s" for c in CASES))
    clean = next((r for r in rows if r["share"] == 0), rows[0])
    for r in rows:
        r["lakeshard_over_clean"] = round(r["lakeshard_cpu_s"] / clean["lakeshard_cpu_s"], 2)
        r["lakeshard_over_exact"] = round(r["lakeshard_cpu_s"] / r["exact_cpu_s"], 2)
        r["arrow_only_over_lakeshard"] = round(r["arrow-only_cpu_s"] / r["lakeshard_cpu_s"], 2)
    return {"lines": args.lines, "file_lines": args.file_lines, "repeat": args.repeat, "rows": rows,
            "machine": f"{platform.platform()}, {len(os.sched_getaffinity(0))} CPUs, "
                       f"Python {platform.python_version()}",
            "at": datetime.now(UTC).isoformat(timespec="seconds")}


def markdown(s: dict[str, Any]) -> str:
    lines = [
        "# Parse CPU by the share of lines only Arrow's reader refuses",
        "",
        f"A generated zone of {s['lines']:,} lines (files of {s['file_lines']:,}) per share; the refused lines are "
        "trailing commas, duplicate keys, `NaN`, integers beyond 64 bits and raw control characters "
        "(`synth.malformed.arrow_refused_line`). CPU of one parsing thread, best of "
        f"{s['repeat']} runs. All three parses give the same events and quarantine rows.",
        "",
        "| share refused | zone MB | lakeshard s | Arrow finds every refusal s | exact rules on every line s "
        "| lakeshard / clean | lakeshard / exact rules |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in s["rows"]:
        lines.append(f"| {r['share'] * 100:g} % | {r['zone_mb']} | **{r['lakeshard_cpu_s']:.2f}** | "
                     f"{r['arrow-only_cpu_s']:.2f} | {r['exact_cpu_s']:.2f} | {r['lakeshard_over_clean']:.2f}x | "
                     f"{r['lakeshard_over_exact']:.2f}x |")
    lines += ["", f"{s['machine']}; {s['at']}. `.venv/bin/python -m bench.bench_refusals`."]
    return "\n".join(lines) + "\n"


def plot(s: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = s["rows"]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for case, style in (("lakeshard", "o-"), ("arrow-only", "s--"), ("exact", "^:")):
        ax.plot(x, [r[f"{case}_cpu_s"] for r in rows], style, label=NAMES[case])
    ax.set_xticks(x, [f"{r['share'] * 100:g} %" for r in rows])
    ax.set_xlabel("share of lines only Arrow's reader refuses")
    ax.set_ylabel("parse CPU, s (one thread)")
    ax.set_yscale("log")
    ax.set_title(f"Parse CPU of {s['lines']:,} landing lines")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=100_000)
    p.add_argument("--file-lines", type=int, default=20_000)
    p.add_argument("--shares", type=lambda v: [float(x) for x in v.split(",")], default=list(SHARES))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=RESULTS, help="folder of refusals.{json,md,png}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    results = measure(args, say=lambda line: print(line, file=sys.stderr, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "refusals.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "refusals.md").write_text(markdown(results))
    plot(results, args.out / "refusals.png")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
