"""Reports of a conformance run: a terminal table (rich), JSON, and a self-contained HTML page."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from korvet.conformance.runner import EXCUSED, FAIL, PASS, SKIP, CheckResult, RunReport

_STYLE = {PASS: "green", FAIL: "bold red", EXCUSED: "yellow", SKIP: "dim"}


def _short(text: str, limit: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def terminal_table(report: RunReport, *, all_rows: bool = True) -> Table:
    table = Table(title=f"Conformance of {report.bootstrap} (profile {report.profile})", show_lines=False)
    table.add_column("check", no_wrap=True)
    table.add_column("result")
    table.add_column("time", justify="right")
    table.add_column("observed / reason")
    family = ""
    for r in sorted(report.results, key=lambda r: r.name):
        if not all_rows and r.status == PASS:
            continue
        if r.family != family:
            family = r.family
            table.add_section()
        note = r.message if r.status != EXCUSED else f"{_short(r.message, 60)} — excused: {r.excuse}"
        table.add_row(r.name, f"[{_STYLE[r.status]}]{r.status}[/]", f"{r.seconds:.1f}s",
                      _short(note, 140) if note else "")
    return table


def summary_table(report: RunReport) -> Table:
    table = Table(title="By group")
    table.add_column("group")
    for status in (PASS, FAIL, EXCUSED, SKIP):
        table.add_column(status, justify="right")
    counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys((PASS, FAIL, EXCUSED, SKIP), 0))
    for r in report.results:
        counts[r.family][r.status] += 1
    for family in sorted(counts):
        row = counts[family]
        cells = [f"[{_STYLE[s]}]{row[s]}[/]" if row[s] else "0" for s in (PASS, FAIL, EXCUSED, SKIP)]
        table.add_row(family, *cells)
    total = report.counts()
    table.add_section()
    table.add_row("total", *[str(total[s]) for s in (PASS, FAIL, EXCUSED, SKIP)])
    return table


def print_report(report: RunReport, console: Console, *, all_rows: bool = True) -> None:
    console.print(terminal_table(report, all_rows=all_rows))
    console.print(summary_table(report))
    counts = report.counts()
    verdict = "[green]PASSED[/]" if report.ok else "[bold red]FAILED[/]"
    console.print(f"{verdict}: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[EXCUSED]} excused, "
                  f"{counts[SKIP]} skipped in {report.seconds:.1f}s (run {report.run_id})")


def write_json(report: RunReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_json(), indent=2, default=str) + "\n")


_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em;color:#1d2330;
background:#fafbfc}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #dde}
.meta{color:#556;font-size:.9em}.cards{display:flex;gap:1em;margin:1em 0}
.card{padding:.6em 1.2em;border-radius:6px;background:#fff;border:1px solid #dde;min-width:6em}
.card b{display:block;font-size:1.6em}
table{border-collapse:collapse;width:100%;background:#fff;font-size:.9em}
th,td{border:1px solid #e3e6ee;padding:.35em .5em;vertical-align:top;text-align:left}
th{background:#f0f2f7}.pass{color:#137333}.fail{color:#b3261e;font-weight:600}
.excused{color:#9a6700}.skip{color:#777}code{font-size:.92em}
details summary{cursor:pointer;color:#335}pre{white-space:pre-wrap;font-size:.85em;background:#f6f8fa;
padding:.5em;margin:.3em 0}.verdict-ok{color:#137333}.verdict-bad{color:#b3261e}
"""


def _details(r: CheckResult) -> str:
    parts = [f"<p><b>Asserts:</b> {html.escape(r.asserts)}</p>",
             f"<p><b>Source:</b> {html.escape(r.source)}</p>"]
    flags = []
    if r.kafka_exact:
        flags.append("Kafka-exact (assumes dense offsets from 0)")
    if r.group_protocol:
        flags.append("classic group protocol")
    if r.requires:
        flags.append(f"requires {r.requires}")
    if flags:
        parts.append(f"<p><b>Notes:</b> {html.escape('; '.join(flags))}</p>")
    if r.excuse:
        parts.append(f"<p><b>Excused:</b> {html.escape(r.excuse)}</p>")
    if r.details:
        parts.append(f"<pre>{html.escape(json.dumps(r.details, indent=2, default=str)[:6000])}</pre>")
    return "".join(parts)


def render_html(report: RunReport) -> str:
    counts = report.counts()
    ok = report.ok
    by_family: dict[str, list[CheckResult]] = defaultdict(list)
    for r in report.results:
        by_family[r.family].append(r)
    rows = []
    for family in sorted(by_family):
        results = sorted(by_family[family], key=lambda r: r.name)
        tally = ", ".join(f"{sum(1 for r in results if r.status == s)} {s}"
                          for s in (PASS, FAIL, EXCUSED, SKIP) if any(r.status == s for r in results))
        name = html.escape(family)
        rows.append(f"<h2 id='{name}'>{name} <span class='meta'>({tally})</span></h2>")
        rows.append("<table><tr><th>check</th><th>API</th><th>result</th><th>time</th><th>observed</th></tr>")
        for r in results:
            message = html.escape(r.message) if r.message else ""
            rows.append(
                f"<tr><td><code>{html.escape(r.name)}</code><details><summary>details</summary>"
                f"{_details(r)}</details></td><td>{html.escape(r.api)}</td>"
                f"<td class='{r.status}'>{r.status}</td><td>{r.seconds:.1f}s</td><td>{message}</td></tr>")
        rows.append("</table>")
    cards = "".join(f"<div class='card {s}'><b>{counts[s]}</b>{s}</div>" for s in (PASS, FAIL, EXCUSED, SKIP))
    verdict = ("<span class='verdict-ok'>passed</span>" if ok else "<span class='verdict-bad'>failed</span>")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Kafka conformance: {html.escape(report.bootstrap)}</title><style>{_CSS}</style></head><body>"
        f"<h1>Kafka conformance of {html.escape(report.bootstrap)}: {verdict}</h1>"
        f"<p class='meta'>profile <b>{html.escape(report.profile)}</b> · run {html.escape(report.run_id)} · "
        f"started {html.escape(report.started_at)} · {report.seconds:.1f}s · {len(report.results)} checks</p>"
        f"<div class='cards'>{cards}</div>{''.join(rows)}</body></html>\n"
    )


def write_html(report: RunReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report))


def load_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data
