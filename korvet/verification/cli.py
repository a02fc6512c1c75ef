"""`korvet spec check`: model-check the specs and print one row per model."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from korvet.verification import replay, tlc, validate
from korvet.verification.live import cli as live_cli
from korvet.verification.values import format_value


def add_parser(commands: Any) -> None:
    spec = commands.add_parser("spec", help="the TLA+ specs: model checking and replay")
    spec_commands = spec.add_subparsers(dest="spec_command", required=True)
    check = spec_commands.add_parser(
        "check",
        help="run TLC on spec/*.tla with their model configs",
        description=(
            "Run TLC on every model in spec/models.yaml (CI-sized models; --deep adds the "
            "bigger ones). Prints one row per model and, on a violation, the counterexample "
            "step by step. Exits non-zero when any model's verdict is not the expected one."
        ),
    )
    check.add_argument("module", nargs="?", help="only models of this module (e.g. OffsetCodec)")
    check.add_argument("--deep", action="store_true", help="also run the deep models")
    check.add_argument("--spec-dir", help="folder with the .tla files and models.yaml")
    check.add_argument("--workers", default="auto", help="TLC worker threads (default: auto)")
    check.add_argument("--show-expected-traces", action="store_true",
                       help="print the counterexamples of expected violations too")
    check.set_defaults(func=run_check)
    replay.add_parser(spec_commands)
    validate.add_parser(spec_commands)
    live_cli.add_parser(spec_commands)


def format_trace(result: tlc.TlcResult) -> str:
    lines = [f"Counterexample for {result.model.name}: {result.violated}"]
    previous: dict[str, Any] = {}
    for step in result.trace:
        where = f"  ({step.location})" if step.location else ""
        lines.append(f"  step {step.number}: {step.action}{where}")
        if not step.state:
            if step.raw:
                lines.append(f"      {step.raw}")
            continue
        for name, value in step.state.items():
            if previous and previous.get(name) == value:
                continue
            marker = "  " if not previous else "* "
            lines.append(f"    {marker}{name} = {format_value(value)}")
        previous = dict(step.state)
    return "\n".join(lines)


def run_check(args: argparse.Namespace) -> int:
    console = Console(stderr=False)
    try:
        directory = tlc.spec_dir(args.spec_dir)
        models = tlc.load_models(directory)
        tlc.tlc_jar()
        tlc.java_binary()
    except (tlc.TlcError, OSError) as exc:
        print(f"korvet spec check: {exc}", file=sys.stderr)
        return 2
    selected = [m for m in models
                if (args.deep or m.tier == "ci") and (not args.module or m.module == args.module)]
    if not selected:
        print(f"korvet spec check: no model matches {args.module!r}", file=sys.stderr)
        return 2
    results: list[tlc.TlcResult] = []
    for index, model in enumerate(selected, start=1):
        label = f"[{index}/{len(selected)}] {model.name} ({model.module}, {model.config})"
        with console.status(f"{label}: starting TLC") as status:
            def progress(generated: int, distinct: int, status: Any = status,
                         label: str = label) -> None:
                status.update(f"{label}: {generated:,} states generated, {distinct:,} distinct")
            result = tlc.run_model(model, directory, workers=args.workers, on_progress=progress,
                                   coverage=True)
        results.append(result)
        verdict = "as expected" if result.as_expected else "NOT as expected"
        console.print(f"{label}: {result.outcome} ({verdict}) in {result.wall_seconds:.1f}s")
        if result.outcome == "violation" and (not result.as_expected or
                                              args.show_expected_traces):
            console.print(format_trace(result), markup=False, highlight=False)
        for error in result.errors:
            console.print(f"  TLC error: {error}", markup=False, highlight=False)
        if result.coverage and model.expect == "pass":
            console.print("  " + coverage_line(result), markup=False, highlight=False)
    console.print(results_table(results))
    if results and results[0].version:
        console.print(f"TLC: {results[0].version}", markup=False, highlight=False)
    unfired = [r for r in results if r.model.expect == "pass"
               and set(r.never_fired) != {name for name, _ in r.model.unexercised}]
    return 0 if all(r.as_expected for r in results) and not unfired else 1


def coverage_line(result: tlc.TlcResult) -> str:
    """Which actions fired and how often (states generated), from TLC's coverage; an action
    that never fired is named, with the model's reason when it declares one."""
    declared = dict(result.model.unexercised)
    parts = []
    for action, count in sorted(result.coverage.items()):
        if count:
            parts.append(f"{action} {count:,}")
        else:
            why = declared.get(action)
            parts.append(f"{action} NEVER FIRED" + (f" (by design: {why})" if why else ""))
    return "actions: " + ", ".join(parts)


def results_table(results: list[tlc.TlcResult]) -> Table:
    table = Table(title="TLC model checking")
    for column in ("model", "module", "tier", "states generated", "distinct states", "depth",
                   "wall time", "never fired", "result"):
        justify = "right" if column in ("states generated", "distinct states", "depth",
                                        "wall time") else "left"
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r in results:
        if r.outcome == "pass":
            verdict = "[green]pass[/green]" if r.as_expected else "[red]pass (violation expected)[/red]"
        elif r.outcome == "violation":
            text = f"violation: {r.violated}"
            verdict = (f"[yellow]{text} (expected)[/yellow]" if r.as_expected
                       else f"[red]{text}[/red]")
        else:
            verdict = "[red]error[/red]"
        undeclared = [a for a in r.never_fired if a not in dict(r.model.unexercised)]
        never = ", ".join(r.never_fired) if r.model.expect == "pass" else ""
        if undeclared:
            never = f"[red]{never}[/red]"
        table.add_row(r.model.name, r.model.module, r.model.tier, f"{r.generated:,}",
                      f"{r.distinct:,}", str(r.depth), f"{r.wall_seconds:.1f}s", never, verdict)
    return table
