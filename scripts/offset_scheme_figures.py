"""Issue 31's measurement: the cost of dense offsets against time offsets, in one run.

    .venv/bin/python scripts/offset_scheme_figures.py [--rounds 2] [--records 300000]
        [--record-sizes 100,1024] [--clients librdkafka,java] [--formats records,batches]
        [--out bench-offset-schemes]

Runs ``korvet bench --targets korvet-embedded`` once per storage format, offset scheme and
round, the schemes alternating (dense first in odd rounds, time first in even ones) so that a
drift of the machine's load falls on both; each invocation starts its own broker on a fresh
embedded Redis (AOF everysec) and measures the produce and consume runs of every record size
and client (one repeat, one warm-up, latency runs cut to 0.5 s and not reported, no
share-consumer runs). Prints, per format,
record size, client and mode, the median records/s of each scheme with its min-max over the
rounds, the broker's and Redis' CPU per record, and Redis' memory per million records of the
produce runs; then the verdict the issue asks for: a dense median within the time runs'
spread (and memory within 5 %). Writes every bench's results.json under ``--out``, the
summary to ``--out/summary.json`` and as a markdown table to ``--out/summary.md``.
Results: docs/performance.md, "Dense offsets against time offsets".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

SCHEMES = ("dense", "time")


def bench(args: argparse.Namespace, storage: str, scheme: str, out: Path) -> list[dict[str, Any]]:
    command = [sys.executable, "-m", "korvet.cli", "bench", "--targets", "korvet-embedded",
               "--clients", args.clients, "--record-sizes", args.record_sizes,
               "--records", str(args.records), "--repeats", "1", "--warmup-runs", "1",
               "--share-consumers", "none", "--latency-seconds", "0.5",
               "--topic-config", f"korvet.storage.format={storage}",
               "--topic-config", f"korvet.offset.scheme={scheme}", "--out", str(out)]
    print("$", " ".join(command[2:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    runs: list[dict[str, Any]] = json.loads((out / "results.json").read_text())["runs"]
    return [run for run in runs if run["mode"] in ("produce", "consume")
            and not run["client"].startswith("ceiling:") and run["error"] is None]


def span(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--record-sizes", default="100,1024")
    parser.add_argument("--clients", default="librdkafka,java")
    parser.add_argument("--formats", default="records,batches")
    parser.add_argument("--out", type=Path, default=Path("bench-offset-schemes"))
    args = parser.parse_args()
    found: dict[tuple[str, int, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for number in range(args.rounds):
        order = SCHEMES if number % 2 == 0 else SCHEMES[::-1]
        for storage in args.formats.split(","):
            for scheme in order:
                for run in bench(args, storage, scheme,
                                 args.out / f"round{number + 1}-{storage}-{scheme}"):
                    found[(storage, run["record_size"], run["client"], run["mode"],
                           scheme)].append(run)
    rows = []
    print("\nformat   record B client      mode     scheme  rec/s median [min-max]   "
          "broker us/rec  Redis us/rec  Redis MiB/M  verdict")
    for (storage, size, client, mode, scheme), runs in sorted(found.items()):
        if scheme != "dense":
            continue
        others = found.get((storage, size, client, mode, "time"), [])
        verdicts = []
        for name, members in (("dense", runs), ("time", others)):
            rates = [r["records_per_sec"] for r in members]
            broker = [r["cpu_us_per_record"].get("broker", 0.0) for r in members]
            redis = [r["cpu_us_per_record"].get("redis", 0.0) for r in members]
            memory = [r["extra"]["redis_bytes_per_million"] / 2**20 for r in members
                      if r["extra"].get("redis_bytes_per_million") is not None]
            verdicts.append((rates, memory))
            row = {"format": storage, "record_size": size, "client": client, "mode": mode,
                   "scheme": name, "records_per_sec": rates, "broker_us": broker,
                   "redis_us": redis, "redis_mib_per_million": memory}
            rows.append(row)
            verdict = ""
            if name == "time" and verdicts[0][0] and rates:
                dense_rate = statistics.median(verdicts[0][0])
                within = dense_rate >= min(rates)
                verdict = ("dense within or above time's spread" if within
                           else f"dense {dense_rate / min(rates) - 1:+.1%} below time's lowest")
                if memory and verdicts[0][1]:
                    grow = statistics.median(verdicts[0][1]) / statistics.median(memory) - 1
                    verdict += f"; memory {grow:+.1%}"
            print(f"{storage:8} {size:8,} {client:11} {mode:8} {name:6} "
                  f"{span(rates) if rates else 'none':24} "
                  f"{statistics.median(broker) if broker else 0:13.1f} "
                  f"{statistics.median(redis) if redis else 0:13.1f} "
                  f"{statistics.median(memory) if memory else 0:11.0f}  {verdict}")
    (args.out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / "summary.md").write_text(markdown(rows))


def markdown(rows: list[dict[str, Any]]) -> str:
    """The summary as the table of docs/performance.md: one line per format, size, client and
    mode, the two schemes side by side."""
    lines = ["| format | record B | client | mode | dense rec/s, median [min-max] | "
             "time rec/s, median [min-max] | broker µs/rec dense / time | "
             "Redis µs/rec dense / time | Redis MiB per million, dense / time |",
             "|---|---|---|---|---|---|---|---|---|"]
    pairs: dict[tuple[str, int, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        pairs[(row["format"], row["record_size"], row["client"], row["mode"])][row["scheme"]] = row

    def median(row: dict[str, Any], name: str) -> str:
        return f"{statistics.median(row[name]):,.1f}" if row[name] else "-"

    for (storage, size, client, mode), both in sorted(pairs.items()):
        dense, time_ = both.get("dense"), both.get("time")
        if not dense or not time_ or not dense["records_per_sec"] or not time_["records_per_sec"]:
            continue
        memory = (f"{statistics.median(dense['redis_mib_per_million']):,.0f} / "
                  f"{statistics.median(time_['redis_mib_per_million']):,.0f}"
                  if mode == "produce" and dense["redis_mib_per_million"] else "")
        lines.append(f"| {storage} | {size:,} | {client} | {mode} | "
                     f"{span(dense['records_per_sec'])} | {span(time_['records_per_sec'])} | "
                     f"{median(dense, 'broker_us')} / {median(time_, 'broker_us')} | "
                     f"{median(dense, 'redis_us')} / {median(time_, 'redis_us')} | {memory} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
