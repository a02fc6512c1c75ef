"""Do a change's figures drop? ``korvet bench`` on an earlier commit and on this work tree,
alternating, in one run.

    .venv/bin/python scripts/compare_bench_commits.py --base REV [--rounds 3]
        [--out bench-commits] [--head-extra ARGS] [-- BENCH ARGS...]

Checks REV out into a temporary git worktree and runs ``python -m korvet.cli bench`` there and
here, once each per round (the base first in odd rounds, this tree first in even ones, so a
drift of the machine's load falls on both), with ``--repeats 1`` and the bench arguments
given after ``--`` (default: korvet-embedded, librdkafka and Java, 100 B and 1 KiB,
300,000 records, one warm-up, latency runs cut to 0.5 s). The base runs with this tree's
virtualenv and jars (.jars, linked); flags its bench does not know must be left out, and
``--head-extra`` gives this tree's bench flags of its own (``"--share-consumers none"`` when
the base has no share-consumer runs). Prints
per target, client, mode and record size the median records/s [min-max] of each side and
the verdict: this tree's median within or above the base's spread, or how far below its
lowest run. Writes each run's results.json under ``--out`` and the table to
``--out/summary.md``. ``--compare`` skips the runs and compares folders already written
(``--out``'s base-N and head-N).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BENCH = ["--targets", "korvet-embedded", "--clients", "librdkafka,java",
                 "--record-sizes", "100,1024", "--records", "300000", "--warmup-runs", "1",
                 "--latency-seconds", "0.5"]
SIDES = ("base", "head")
Key = tuple[str, str, str, int]


def span(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def run_bench(cwd: Path, bench: list[str], out: Path) -> None:
    command = [sys.executable, "-m", "korvet.cli", "bench", "--repeats", "1", *bench,
               "--out", str(out)]
    print(f"$ (cd {cwd} && {' '.join(command)})", flush=True)
    subprocess.run(command, cwd=cwd, check=True)


def collect(out: Path) -> dict[str, dict[Key, list[float]]]:
    found: dict[str, dict[Key, list[float]]] = {side: defaultdict(list) for side in SIDES}
    for side in SIDES:
        for results in sorted(out.glob(f"{side}-*/results.json")):
            for run in json.loads(results.read_text())["runs"]:
                if run.get("error") or not run.get("records_per_sec") or \
                        run["mode"] not in ("produce", "consume"):
                    continue
                key = (run["target"], run["client"], run["mode"], run["record_size"])
                found[side][key].append(run["records_per_sec"])
    return found


def compare(found: dict[str, dict[Key, list[float]]], base: str) -> str:
    lines = [f"| target | client | mode | record B | base {base} rec/s, median [min-max] | "
             "this tree rec/s, median [min-max] | verdict |", "|---|---|---|---|---|---|---|"]
    for key in sorted(found["head"]):
        head, old = found["head"][key], found["base"].get(key, [])
        if not old:
            continue
        median = statistics.median(head)
        verdict = ("within or above the base's spread" if median >= min(old)
                   else f"{median / min(old) - 1:+.1%} below the base's lowest")
        target, client, mode, size = key
        lines.append(f"| {target} | {client} | {mode} | {size:,} | {span(old)} | {span(head)} "
                     f"| {verdict} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    argv = sys.argv[1:]
    bench = DEFAULT_BENCH
    if "--" in argv:
        bench = argv[argv.index("--") + 1:]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench-commits"))
    parser.add_argument("--head-extra", default="",
                        help="bench flags for this tree only, as one string")
    parser.add_argument("--compare", action="store_true",
                        help="only compare the folders already under --out")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if not args.compare:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="korvet-base-") as folder:
            worktree = Path(folder) / "base"
            subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.base],
                           cwd=ROOT, check=True)
            jars = ROOT / ".jars"  # the pinned jars (untracked): the Java clients and Kafka
            if jars.is_dir() and not (worktree / ".jars").exists():
                (worktree / ".jars").symlink_to(jars)
            try:
                for number in range(1, args.rounds + 1):
                    order = SIDES if number % 2 else SIDES[::-1]
                    for side in order:
                        run_bench(worktree if side == "base" else ROOT,
                                  bench if side == "base" else [*bench, *shlex.split(
                                      args.head_extra)], out / f"{side}-{number}")
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(worktree)],
                               cwd=ROOT, check=False)
    table = compare(collect(out), args.base)
    print(table)
    (out / "summary.md").write_text(table)


if __name__ == "__main__":
    main()
