"""`korvet conformance`: run the conformance suite against any Kafka-compatible broker.

The suite's top floor: it runs the checks through the harness, or, with ``--oracle``, the
differential mode (korvet/conformance/__init__.py describes the floors).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "conformance",
        help="run the Kafka conformance suite against a broker",
        description=(
            "Run the conformance suite against the broker at --bootstrap: raw-protocol checks of every "
            "API a Kafka client uses, the classic consumer-group protocol, real clients (librdkafka, "
            "kafka-python, aiokafka, kcat, Kafka's Java tools), Jepsen-style histories and generated "
            "requests. Exits 1 when a check fails (checks excused by the profile do not fail), 2 when "
            "the broker cannot be reached."
        ),
    )
    parser.add_argument("--bootstrap", metavar="HOST:PORT", help="the broker to test")
    parser.add_argument("--start", metavar="BROKER",
                        help="start the broker to test instead of --bootstrap, and restart it if a check "
                             "kills it: 'kfake', 'kafka' (the pinned jars) or a command line with {port} "
                             "where its loopback port goes")
    parser.add_argument("--profile", default="kafka", metavar="NAME|FILE",
                        help="expected differences: kafka (none: every check must pass), a shipped profile "
                             "(korvet, kfake) or a YAML file (docs/conformance.md); default kafka")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    parser.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    parser.add_argument("--oracle", metavar="HOST:PORT",
                        help="differential mode: send the same generated request sequences to the broker "
                             "under test and to this Apache Kafka, and compare the answers field by field "
                             "(instead of the checks)")
    parser.add_argument("--examples", type=int, default=60, metavar="N",
                        help="differential mode: generated sequences per API (default 60)")
    parser.add_argument("--counterexamples", type=Path, metavar="DIR",
                        help="differential mode: write each shrunk counterexample there as a replay file")
    parser.add_argument("--replay", type=Path, metavar="FILE",
                        help="with --oracle: send a replay file's requests to both brokers and show "
                             "the answers")
    parser.add_argument("--junit-xml", type=Path, metavar="FILE",
                        help="write a JUnit XML report (one test case per check) for CI systems")
    parser.add_argument("--only", action="append", metavar="GLOB",
                        help="run only checks whose name matches (repeatable; commas separate globs too)")
    parser.add_argument("--list", action="store_true", help="list the checks (after --only) and exit")
    parser.add_argument("--jobs", type=int, default=8,
                        help="checks run at the same time (most wait on the broker; default 8)")
    parser.add_argument("--cleanup", action="store_true",
                        help="delete the topics this run created (kc-<run id>-*) when it is done")
    parser.add_argument("--security", type=Path, metavar="FILE",
                        help="YAML naming the broker's SASL_SSL listener, its CA file and an admin user: "
                             "runs the security.* checks (skipped without it; docs/users/security.md)")
    parser.add_argument("--failures-only", action="store_true",
                        help="the terminal table shows only checks that did not pass")
    parser.set_defaults(func=run)


def _security_target(path: Path | None) -> Any:
    if path is None:
        return None
    from korvet.conformance.harness.security import SecurityTarget

    try:
        return SecurityTarget.load(path)
    except ValueError as exc:
        print(f"korvet conformance: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _patterns(values: list[str] | None) -> list[str]:
    return [p.strip() for value in values or [] for p in value.split(",") if p.strip()]


def run(args: argparse.Namespace) -> int:
    from korvet.conformance.harness.profile import ProfileError, load
    from korvet.conformance.harness.registry import load_checks, select

    console = Console()
    try:
        profile = load(args.profile)
    except ProfileError as exc:
        print(f"korvet conformance: {exc}", file=sys.stderr)
        return 2
    if args.replay and not args.oracle:
        print("korvet conformance: --replay needs --oracle (and --bootstrap or --start)", file=sys.stderr)
        return 2
    checks = select(load_checks().values(), _patterns(args.only))
    if args.list and not args.oracle:
        from korvet.conformance.harness.catalogue import catalogue_table

        console.print(catalogue_table(checks))
        console.print(f"{len(checks)} checks")
        return 0
    if bool(args.bootstrap) == bool(args.start):
        print("korvet conformance: give --bootstrap HOST:PORT or --start BROKER (or --list)", file=sys.stderr)
        return 2
    if not checks:
        print(f"korvet conformance: no check matches {_patterns(args.only)}", file=sys.stderr)
        return 2
    unmatched = profile.unmatched(c.name for c in load_checks().values())
    if unmatched:
        console.print(f"[yellow]profile {profile.name}: these patterns name no check: "
                      f"{', '.join(unmatched)}[/]")
    with contextlib.ExitStack() as stack:
        broker = None
        if args.start:
            from korvet.conformance.harness.brokers import BrokerError, start_broker

            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="korvet-conformance-")))
            try:
                broker = start_broker(args.start, work)
            except BrokerError as exc:
                print(f"korvet conformance: cannot start {args.start}: {exc}", file=sys.stderr)
                return 2
            stack.callback(broker.stop)
            console.print(f"started {args.start} on {broker.bootstrap}")
        bootstrap = args.bootstrap or (broker.bootstrap if broker is not None else "")
        if args.oracle:
            return _differential(args, console, profile, bootstrap, broker)
        return _run(args, console, checks, profile, bootstrap, broker)


def _differential(args: argparse.Namespace, console: Console, profile: Any, bootstrap: str,
                  broker: Any) -> int:
    import uuid

    from korvet.conformance.harness.registry import select
    from korvet.conformance.kafka.wire import WireError
    from korvet.conformance.modes import differential

    try:
        if args.replay:
            text, same = differential.replay(str(args.replay), bootstrap, args.oracle, profile)
            console.print(text, highlight=False, markup=False)
            return 0 if same else 1
        subject, oracle = differential.sides(bootstrap, args.oracle)
    except (OSError, WireError) as exc:
        print(f"korvet conformance: cannot reach a broker: {exc}", file=sys.stderr)
        return 2
    checks, left_out = differential.differential_checks(subject, oracle, profile, uuid.uuid4().hex[:6],
                                                        examples=args.examples)
    checks = select(checks, _patterns(args.only))
    for api, why in sorted(left_out.items()):
        console.print(f"[dim]not compared: {api}: {why}[/]")
    if args.list:
        for c in checks:
            console.print(f"{c.name}  {c.api}")
        return 0
    args.jobs = 1
    return _run(args, console, checks, profile, bootstrap, broker,
                title=f"differential against {args.oracle}")


def _run(args: argparse.Namespace, console: Console, checks: list[Any], profile: Any, bootstrap: str,  # noqa: C901, PLR0915 -- the run, its reports and verdict, in order
         broker: Any, title: str = "") -> int:
    from korvet.conformance.harness import report as reports
    from korvet.conformance.harness import runner
    from korvet.conformance.kafka.wire import WireError

    security = _security_target(args.security)
    running: set[str] = set()
    lock = threading.Lock()
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("starting", total=len(checks))

        def on_event(kind: str, check: Any, result: Any) -> None:
            with lock:
                if kind == "start":
                    running.add(check.name)
                else:
                    running.discard(check.name)
                    progress.advance(task)
                    if result.status == runner.FAIL:
                        progress.console.print(f"[red]fail[/] {check.name}: {result.message}",
                                               markup=True, highlight=False)
                shown = ", ".join(sorted(running)[:3]) + (" …" if len(running) > 3 else "")
                progress.update(task, description=shown or "finishing")

        def on_note(text: str) -> None:
            progress.console.print(f"[bold yellow]broker:[/] {text}", markup=True, highlight=False)

        try:
            result = runner.run(bootstrap, checks, profile=profile, jobs=args.jobs, on_event=on_event,
                                broker=broker, on_note=on_note, security=security)
        except (OSError, WireError) as exc:
            print(f"korvet conformance: cannot reach {bootstrap}: {exc}", file=sys.stderr)
            return 2
    if title:
        result.suite = f"korvet conformance, {title}"
    reports.print_report(result, console, all_rows=not args.failures_only)
    for failed in result.failures():
        replay = failed.details.get("replay")
        if not replay:
            continue
        console.print(f"[bold]counterexample of {failed.name}[/] (a replay file; shrunk):")
        console.print(replay, highlight=False, markup=False)
        if args.counterexamples:
            args.counterexamples.mkdir(parents=True, exist_ok=True)
            path = args.counterexamples / f"{failed.name}.json"
            path.write_text(replay + "\n")
            console.print(f"written to {path}: korvet conformance --replay {path} --bootstrap {bootstrap} "
                          f"--oracle {args.oracle}")
    if args.cleanup:
        try:
            deleted = runner.cleanup(bootstrap, result.run_id)
            console.print(f"deleted {deleted} topics of run {result.run_id}")
        except (OSError, WireError) as exc:
            console.print(f"[yellow]cleanup failed: {exc}[/]")
    if args.json:
        reports.write_json(result, args.json)
        console.print(f"JSON report: {args.json}")
    if args.html:
        reports.write_html(result, args.html)
        console.print(f"HTML report: {args.html}")
    if args.junit_xml:
        reports.write_junit(result, args.junit_xml)
        console.print(f"JUnit XML report: {args.junit_xml}")
    return 0 if result.ok else 1
