"""`korvet bench`: the benchmark of docs/performance.md in one command."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from .model import CLIENTS, STORAGE_FORMATS, TARGETS, BenchParams

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
# Six latency runs (three targets, two clients) wait out their fixed rate: half a second
# each, after a quarter second of warm-up, still gives the steady-state line and the CDF.
SMOKE = {"records": 2_000, "repeats": 1, "record_sizes": (100,), "latency_rate": 2_000,
         "latency_seconds": 0.5, "latency_warmup_seconds": 0.25}
SMOKE_SHARE_CONSUMERS = (2,)  # unless --share-consumers says otherwise


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("expected positive integers")
    return values


def _counts_or_none(text: str) -> tuple[int, ...]:
    """Positive counts, or none at all ('none')."""
    return () if text.strip().lower() == "none" else _int_list(text)


def _choices(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(part.strip() for part in text.split(",") if part.strip())
        unknown = [v for v in values if v not in allowed]
        if unknown or not values:
            raise argparse.ArgumentTypeError(
                f"{', '.join(unknown) or 'nothing'}: choose from {', '.join(allowed)}")
        return values
    return parse


def add_parser(commands: Any) -> None:
    bench = commands.add_parser(
        "bench",
        help="benchmark Korvet against Redis' ceiling and Apache Kafka",
        description=(
            "Measure produce and consume throughput and produce latency with real clients "
            "(Kafka's ProducerPerformance/ConsumerPerformance and librdkafka) against Korvet "
            "with its embedded Redis (AOF everysec), Korvet without persistence and Apache "
            "Kafka, each started here on free loopback ports, one at a time; and the ceiling: "
            "the same records appended by one Python process through the broker's own append "
            "script. Prints a table of medians with their spread, the ratios korvet/ceiling "
            "and korvet/kafka and the issue's targets, and writes results.json, results.md "
            "and PNG plots to --out. See docs/performance.md."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = BenchParams()
    bench.add_argument("--record-sizes", type=_int_list, default=defaults.record_sizes,
                       metavar="B,B", help="record (value) sizes in bytes")
    bench.add_argument("--records", type=int, default=defaults.records,
                       help="records per produce (and consume) run")
    bench.add_argument("--partitions", type=int, default=defaults.partitions)
    bench.add_argument("--acks", default=defaults.acks, choices=("0", "1", "all", "-1"))
    bench.add_argument("--batch-size", type=int, default=defaults.batch_size,
                       help="producer batch.size in bytes (both clients)")
    bench.add_argument("--batch-sizes", type=_int_list, default=defaults.batch_sizes,
                       metavar="B,B",
                       help="also sweep the producers' batch.size over these values: produce runs "
                            "of the first record size per client, repeat and (on Korvet) storage "
                            "format, plotted as throughput against batch.size")
    bench.add_argument("--sweep-formats", type=_choices(STORAGE_FORMATS),
                       default=defaults.sweep_formats, metavar=",".join(STORAGE_FORMATS),
                       help="the storage formats (korvet.storage.format) of the sweep's Korvet "
                            "topics")
    bench.add_argument("--linger-ms", type=int, default=defaults.linger_ms,
                       help="producer linger.ms (both clients)")
    bench.add_argument("--compression", default=defaults.compression, choices=COMPRESSIONS)
    bench.add_argument("--idempotence", action="store_true",
                       help="enable.idempotence=true on both producers (default: false on both)")
    bench.add_argument("--transaction-ms", type=int, default=defaults.transaction_ms,
                       metavar="MS",
                       help="transactional producers (both clients) committing a transaction "
                            "every MS ms, as Kafka's ProducerPerformance "
                            "--transaction-duration-ms does; 0: none (implies --idempotence and "
                            "--acks all)")
    bench.add_argument("--topic-config", action="append", default=[], metavar="NAME=VALUE",
                       help="a config of every benchmark topic (and the ceiling's), e.g. "
                            "retention.ms=-1; repeatable")
    bench.add_argument("--repeats", type=int, default=defaults.repeats)
    bench.add_argument("--warmup-runs", type=int, default=defaults.warmup_runs,
                       help="unrecorded produce and consume runs per client and record size on "
                            "each target before its measured runs (a JVM broker compiles its hot "
                            "paths during its first runs); 0: none")
    bench.add_argument("--targets", type=_choices(TARGETS), default=defaults.targets,
                       metavar=",".join(TARGETS))
    bench.add_argument("--clients", type=_choices(CLIENTS), default=defaults.clients,
                       metavar=",".join(CLIENTS))
    bench.add_argument("--latency-rate", type=int, default=defaults.latency_rate,
                       help="records/s of the fixed-rate produce runs that measure latency")
    bench.add_argument("--latency-seconds", type=float, default=defaults.latency_seconds,
                       help="length of a latency run after its warm-up second")
    bench.add_argument("--share-consumers", type=_counts_or_none, default=None,
                       metavar="N,N",
                       help="share-consumer runs: for each N, N share consumers of one share "
                            "group (Kafka's ShareConsumerPerformance) read --records records of "
                            "the first record size; records/s and redeliveries ('none': no "
                            "share-consumer runs); default "
                            f"{','.join(map(str, defaults.share_consumers))}, with --smoke "
                            f"{','.join(map(str, SMOKE_SHARE_CONSUMERS))}")
    bench.add_argument("--out", type=Path, default=Path("bench-results"),
                       help="folder for results.json, results.md and the PNGs")
    bench.add_argument("--work-dir", type=Path, default=None,
                       help="folder for the brokers' data (default: a temporary folder, removed)")
    bench.add_argument("--smoke", action="store_true",
                       help=f"tiny run for the test suite: {SMOKE['records']:,} records, 1 repeat, "
                            "100 B only, latency at 2,000 rec/s")
    bench.add_argument("--profile", action="store_true",
                       help="one more produce and consume per Korvet target, client and size with "
                            "py-spy on the broker (and Redis' commandstats); into OUT/profiles")
    bench.add_argument("--render-doc", type=Path, default=None, metavar="RESULTS_JSON",
                       help="do not run: render the markdown tables of a results file (to stdout, "
                            "or into --doc) and, with --images, its plots")
    bench.add_argument("--doc", type=Path, default=None,
                       help="with --render-doc: replace the generated block of this markdown file")
    bench.add_argument("--images", type=Path, default=None,
                       help="with --render-doc: write the PNGs into this folder")
    bench.set_defaults(func=run_bench)


def params_from_args(args: argparse.Namespace) -> BenchParams:
    values: dict[str, Any] = {
        "record_sizes": args.record_sizes, "records": args.records, "partitions": args.partitions,
        # a transactional producer is idempotent, and an idempotent one needs acks=all
        "acks": "all" if args.transaction_ms > 0 else args.acks,
        "batch_size": args.batch_size, "linger_ms": args.linger_ms,
        "compression": args.compression,
        "idempotence": args.idempotence or args.transaction_ms > 0,
        "transaction_ms": args.transaction_ms,
        "topic_configs": tuple(args.topic_config),
        "repeats": args.repeats, "targets": args.targets, "clients": args.clients,
        "latency_rate": args.latency_rate, "latency_seconds": args.latency_seconds,
        "smoke": args.smoke, "profile": args.profile,
        "batch_sizes": args.batch_sizes, "sweep_formats": args.sweep_formats,
        "warmup_runs": args.warmup_runs,
    }
    if args.smoke:
        values.update(SMOKE)
    values["share_consumers"] = (
        args.share_consumers if args.share_consumers is not None
        else SMOKE_SHARE_CONSUMERS if args.smoke else BenchParams().share_consumers)
    if values["records"] < 1 or values["repeats"] < 1 or values["partitions"] < 1:
        raise ValueError("--records, --repeats and --partitions must be positive")
    if any(n < 1 for n in values["share_consumers"]):
        raise ValueError("--share-consumers takes positive counts")
    if values["warmup_runs"] < 0:
        raise ValueError("--warmup-runs must be 0 or more")
    if any("=" not in item or item.startswith("=") for item in values["topic_configs"]):
        raise ValueError("--topic-config takes NAME=VALUE")
    if values["latency_rate"] < 1:
        raise ValueError("--latency-rate must be positive")
    return BenchParams(**values)


def _render(args: argparse.Namespace, console: Console) -> int:
    from . import plots, report
    from .runner import BenchResult

    result = BenchResult.load(args.render_doc)
    image_prefix = "img/"
    if args.images is not None:
        plots.plot_all(result, args.images)
        if args.doc is not None:
            image_prefix = Path(args.images.resolve().relative_to(args.doc.resolve().parent)
                                if args.images.resolve().is_relative_to(args.doc.resolve().parent)
                                else args.images).as_posix().rstrip("/") + "/"
    markdown = report.render_markdown(result, image_prefix=image_prefix)
    if args.doc is None:
        sys.stdout.write(markdown)
    else:
        report.update_doc(args.doc, markdown)
        console.print(f"updated {args.doc}")
    return 0


def run_bench(args: argparse.Namespace) -> int:
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    if args.render_doc is not None:
        return _render(args, console)
    try:
        params = params_from_args(args)
    except ValueError as exc:
        print(f"korvet bench: {exc}", file=sys.stderr)
        return 2
    from . import plots, report
    from .runner import BenchRunner

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="korvet-bench-") as scratch:
        work_dir = args.work_dir or Path(scratch)
        work_dir.mkdir(parents=True, exist_ok=True)
        runner = BenchRunner(params, work_dir, console,
                             profile_dir=out / "profiles" if params.profile else None)
        result = runner.run()
    result.save(out / "results.json")
    report.print_tables(result, Console(width=None if sys.stdout.isatty() else 200))
    paths = plots.plot_all(result, out)
    (out / "results.md").write_text(report.render_markdown(result, image_prefix=""))
    console.print(f"wrote {out / 'results.json'}, {out / 'results.md'}, "
                  + ", ".join(str(p) for p in paths))
    failed = [r for r in result.runs if not r.ok and not r.extra.get("unsupported")]
    if failed:
        console.print(f"[red]{len(failed)} run(s) failed[/red]")
        return 1
    return 0
