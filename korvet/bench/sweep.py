"""The producer batch.size sweep of ``korvet bench --batch-sizes``: produce throughput against
the producers' ``batch.size``, for each storage format of a Korvet target and for Kafka.

Its runs are ``Run``s of mode ``SWEEP`` with ``extra["batch_size"]`` and, on a Korvet target,
``extra["storage_format"]``; they stay out of the main table's medians (summary.py), which
are all at the one ``--batch-size``. Pure functions of the runs, like summary.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model import CLIENTS, KAFKA, SWEEP, TARGETS, Run

PNG = "bench-batch-size.png"
HEADERS = ("target", "storage format", "client", "batch.size B", "rec/s (median)", "min–max",
           "MB/s", "rec/batch", "runs")


@dataclass(frozen=True, slots=True)
class SweepCell:
    """The repeats of one (target, storage format, client, batch.size)."""

    target: str
    storage_format: str  # "" for Kafka
    client: str
    batch_size: int
    record_size: int
    n: int
    failed: int
    median: float
    low: float
    high: float
    mb_per_sec: float
    records_per_batch: float | None

    @property
    def series(self) -> str:
        where = f"{self.target} ({self.storage_format})" if self.storage_format else self.target
        return f"{where}: {self.client}"


def _rank(cell: SweepCell) -> tuple[int, str, int, int]:
    target = TARGETS.index(cell.target) if cell.target in TARGETS else len(TARGETS)
    client = CLIENTS.index(cell.client) if cell.client in CLIENTS else len(CLIENTS)
    return (target, cell.storage_format, client, cell.batch_size)


def sweep_cells(runs: Sequence[Run]) -> list[SweepCell]:
    groups: dict[tuple[str, str, str, int, int], list[Run]] = {}
    for run in runs:
        if run.mode != SWEEP:
            continue
        key = (run.target, str(run.extra.get("storage_format", "")), run.client,
               int(run.extra["batch_size"]), run.record_size)
        groups.setdefault(key, []).append(run)
    cells = []
    for (target, storage, client, batch_size, size), members in groups.items():
        good = [r for r in members if r.ok]
        rates = [r.records_per_sec for r in good]
        batches = [r.records_per_batch for r in good if r.records_per_batch]
        cells.append(SweepCell(
            target, storage, client, batch_size, size, len(good), len(members) - len(good),
            statistics.median(rates) if rates else 0.0, min(rates, default=0.0),
            max(rates, default=0.0),
            statistics.median(r.mb_per_sec for r in good) if good else 0.0,
            statistics.median(batches) if batches else None))
    return sorted(cells, key=_rank)


def rows(cells: Sequence[SweepCell]) -> list[list[str]]:
    return [[c.target, c.storage_format or "–", c.client, f"{c.batch_size:,}",
             f"{c.median:,.0f}" if c.n else "failed", f"{c.low:,.0f}–{c.high:,.0f}" if c.n else "–",
             f"{c.mb_per_sec:.1f}", f"{c.records_per_batch:.0f}" if c.records_per_batch else "–",
             f"{c.n}" + (f" ({c.failed} failed)" if c.failed else "")]
            for c in cells]


def plot(cells: Sequence[SweepCell], path: Path, title: str, pyplot: Any) -> None:
    """Produce records/s against batch.size, one line per target, format and client."""
    figure, axis = pyplot.subplots(figsize=(10, 6))
    series: dict[str, list[SweepCell]] = {}
    for cell in cells:
        if cell.n:
            series.setdefault(cell.series, []).append(cell)
    for label, members in series.items():
        members.sort(key=lambda c: c.batch_size)
        xs = [c.batch_size for c in members]
        ys = [c.median for c in members]
        errors = [[c.median - c.low for c in members], [c.high - c.median for c in members]]
        dashed = members[0].target == KAFKA
        axis.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=label,
                      linestyle="--" if dashed else "-")
    axis.set_xscale("log", base=2)
    axis.set_xticks(sorted({c.batch_size for c in cells}),
                    [f"{b:,}" for b in sorted({c.batch_size for c in cells})])
    axis.set_xlabel("producer batch.size (bytes)")
    axis.set_ylabel("produce records per second (median, bars = min–max)")
    axis.grid(which="both", alpha=0.3)
    axis.legend(fontsize=8)
    axis.set_title(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
