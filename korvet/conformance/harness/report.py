"""Reports of a conformance run: a terminal table (rich), JSON, JUnit XML and a self-contained HTML page."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from korvet.conformance.harness.runner import EXCUSED, FAIL, PASS, SKIP, CheckResult, RunReport

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
        note = r.message if r.status != EXCUSED else f"{_short(r.message, 60)} — excused: {r.excuse_key}"
        if r.excuse_unneeded:
            note = f"passes, but profile {report.profile} still excuses it ({r.excuse_key})"
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
    for incident in report.incidents:
        killers = ", ".join(incident["killers"]) or incident.get("note", "not found")
        suspects = ", ".join(incident["suspects"]) or "(nothing)"
        console.print(f"[bold yellow]the broker died[/] while {suspects} "
                      f"ran; killed by: {killers}; restarts: {incident.get('restarts', 0)}")
    if report.stopped:
        console.print(f"[bold red]the run stopped early:[/] {report.stopped}")
    unneeded = report.unneeded_excuses()
    if unneeded:
        console.print(f"[yellow]{len(unneeded)} checks the profile excuses now pass[/] (remove their excuses "
                      f"from profile {report.profile}?): {', '.join(r.name for r in unneeded)}")
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
.pair{display:flex;gap:.5em}.pair pre{flex:1;max-height:30em;overflow:auto}.exchange{margin:.6em 0 0}
a.fail{color:#b3261e;font-weight:600}
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
        parts.append(f"<p><b>Excused ({html.escape(r.excuse_key or '')}):</b> {html.escape(r.excuse)} "
                     f"<i>{html.escape(r.reference or '')}</i></p>")
    if r.excuse_unneeded:
        parts.append(f"<p><b>Passes although the profile excuses it</b> ({html.escape(r.excuse_key or '')}): "
                     "the excuse may no longer be needed.</p>")
    if r.details:
        parts.append(f"<pre>{html.escape(json.dumps(r.details, indent=2, default=str)[:6000])}</pre>")
    for exchange in r.exchanges:
        parts.append(
            f"<p class='exchange'><b>{html.escape(str(exchange['api']))}</b> on "
            f"{html.escape(exchange['connection'])}, "
            f"correlation id {exchange['correlation_id']}</p>"
            f"<div class='pair'><pre><b>request</b>\n{html.escape(_json(exchange['request']))}</pre>"
            f"<pre><b>response</b>\n{html.escape(_json(exchange['response']))}</pre></div>")
    return "".join(parts)


def _json(value: Any) -> str:
    if value is None:
        return "(no response)"
    return value if isinstance(value, str) else json.dumps(value, indent=1, default=str)


def render_html(report: RunReport) -> str:
    counts = report.counts()
    ok = report.ok
    by_api: dict[str, list[CheckResult]] = defaultdict(list)
    for r in report.results:
        by_api[r.api].append(r)
    rows = []
    order = sorted(by_api, key=lambda api: (not any(r.status == FAIL for r in by_api[api]), api))
    failing = {api for api, results in by_api.items() if any(r.status == FAIL for r in results)}
    toc = " · ".join(f"<a href='#{_anchor(api)}' class='{'fail' if api in failing else ''}'>"
                     f"{html.escape(api)}</a>" for api in order)
    rows.append(f"<p class='meta'>APIs (those with failures first): {toc}</p>")
    for incident in report.incidents:
        killers = ", ".join(incident["killers"]) or incident.get("note", "?")
        rows.append(f"<p class='fail'>The broker died while {html.escape(', '.join(incident['suspects']))} "
                    f"ran; killed by: {html.escape(killers)}</p>"
                    f"<pre>{html.escape(str(incident['death']))}</pre>")
    if report.stopped:
        rows.append(f"<p class='fail'>The run stopped early: {html.escape(report.stopped)}</p>")
    for api in order:
        results = sorted(by_api[api], key=lambda r: (r.status != FAIL, r.name))
        tally = ", ".join(f"{sum(1 for r in results if r.status == s)} {s}"
                          for s in (PASS, FAIL, EXCUSED, SKIP) if any(r.status == s for r in results))
        rows.append(f"<h2 id='{_anchor(api)}'>{html.escape(api)} <span class='meta'>({tally})</span></h2>")
        rows.append("<table><tr><th>check</th><th>result</th><th>time</th><th>observed</th></tr>")
        for r in results:
            message = html.escape(r.message) if r.message else ""
            if r.excuse_unneeded:
                message = "passes although the profile excuses it"
            opened = " open" if r.status == FAIL else ""
            rows.append(
                f"<tr><td><code>{html.escape(r.name)}</code><details{opened}><summary>details</summary>"
                f"{_details(r)}</details></td>"
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


def _anchor(api: str) -> str:
    return "api-" + re.sub(r"[^a-z0-9]+", "-", api.lower()).strip("-")


def write_html(report: RunReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report))


def junit_xml(report: RunReport) -> str:
    """JUnit XML: one <testsuite> per check group, one <testcase> per check. A failed check is a
    <failure> with what it observed and its last requests and responses; excused and skipped checks
    are <skipped> with the reason, so CI systems show them without failing the build."""
    root = ET.Element("testsuites", name=f"korvet conformance of {report.bootstrap}",
                      tests=str(len(report.results)), failures=str(report.counts()[FAIL]),
                      time=f"{report.seconds:.3f}")
    by_family: dict[str, list[CheckResult]] = defaultdict(list)
    for r in report.results:
        by_family[r.family].append(r)
    for family in sorted(by_family):
        results = sorted(by_family[family], key=lambda r: r.name)
        suite = ET.SubElement(
            root, "testsuite", name=f"conformance.{family}", tests=str(len(results)),
            failures=str(sum(r.status == FAIL for r in results)), errors="0",
            skipped=str(sum(r.status in (EXCUSED, SKIP) for r in results)),
            time=f"{sum(r.seconds for r in results):.3f}", timestamp=report.started_at[:19])
        for r in results:
            case = ET.SubElement(suite, "testcase", classname=f"conformance.{family}", name=r.name,
                                 time=f"{r.seconds:.3f}")
            if r.status == FAIL:
                failure = ET.SubElement(case, "failure", message=_short(r.message, 500), type="CheckFailed")
                body = [r.message, "", f"asserts: {r.asserts}", f"source: {r.source}"]
                if r.details:
                    body += ["", json.dumps(r.details, indent=1, default=str)[:6000]]
                for exchange in r.exchanges:
                    body += ["", f"{exchange['api']} (correlation {exchange['correlation_id']})",
                             "request: " + _json(exchange["request"]),
                             "response: " + _json(exchange["response"])]
                failure.text = "\n".join(body)
            elif r.status == EXCUSED:
                reason = f"excused by profile {report.profile} ({r.excuse_key}): {r.excuse}"
                ET.SubElement(case, "skipped", message=_short(reason, 500)).text = r.message
            elif r.status == SKIP:
                ET.SubElement(case, "skipped", message=_short(r.message, 500))
            elif r.excuse_unneeded:
                ET.SubElement(case, "system-out").text = (
                    f"passes although profile {report.profile} excuses it ({r.excuse_key})")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(report: RunReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(report))


def load_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data
