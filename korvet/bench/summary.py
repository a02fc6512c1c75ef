"""From raw runs to what the table shows: medians with their spread, ratios, verdicts.

Pure functions of the runs (and the parameters), so a results file renders the same
table wherever and whenever it is rendered.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .model import (
    CEILING_PREFIX,
    CLIENTS,
    CONSUME,
    KAFKA,
    KORVET_EMBEDDED,
    KORVET_NOPERSIST,
    KORVET_TARGETS,
    LATENCY,
    MODES,
    PRODUCE,
    TARGETS,
    BenchParams,
    Run,
    ceiling_client,
)


@dataclass(frozen=True, slots=True)
class Cell:
    """The repeats of one (target, client, mode, record size)."""

    target: str
    client: str
    mode: str
    record_size: int
    n: int
    failed: int
    median: float  # records/s
    low: float
    high: float
    mb_per_sec: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    records_per_batch: float | None = None
    cpu_us_per_record: dict[str, float] = field(default_factory=dict)
    rate: int | None = None
    errors: tuple[str, ...] = ()
    unsupported: bool = False  # every run was skipped: the broker lacks what the client needs


def target_rank(target: str) -> int:
    """Where a target's rows go: in TARGETS' order, unknown ones last."""
    return TARGETS.index(target) if target in TARGETS else len(TARGETS)


def _order(run_or_cell: Run | Cell) -> tuple[int, int, int, int, str]:
    target = target_rank(run_or_cell.target)
    client = run_or_cell.client
    base = client.removeprefix(CEILING_PREFIX)
    client_rank = (CLIENTS.index(base) if base in CLIENTS else len(CLIENTS)) * 2 + (
        1 if client.startswith(CEILING_PREFIX) else 0)
    mode = MODES.index(run_or_cell.mode) if run_or_cell.mode in MODES else len(MODES)
    return (target, mode, run_or_cell.record_size, client_rank, client)


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(runs: Sequence[Run]) -> list[Cell]:
    groups: dict[tuple[str, str, str, int], list[Run]] = {}
    for run in runs:
        if run.extra.get("profiled") or run.mode not in MODES:  # the sweep's: sweep.py
            continue
        groups.setdefault((run.target, run.client, run.mode, run.record_size), []).append(run)
    cells = []
    for (target, client, mode, size), members in groups.items():
        good = [r for r in members if r.ok]
        rates = [r.records_per_sec for r in good]
        cpu: dict[str, float] = {}
        for name in sorted({k for r in good for k in r.cpu_us_per_record}):
            value = _median(r.cpu_us_per_record.get(name) for r in good)
            if value is not None:
                cpu[name] = value
        cells.append(Cell(
            target=target, client=client, mode=mode, record_size=size,
            n=len(good), failed=len(members) - len(good),
            median=statistics.median(rates) if rates else 0.0,
            low=min(rates) if rates else 0.0, high=max(rates) if rates else 0.0,
            mb_per_sec=_median(r.mb_per_sec for r in good) or 0.0,
            p50_ms=_median(r.latency.steady_p50_ms if r.latency.steady_p50_ms is not None
                           else r.latency.p50_ms for r in good if r.latency),
            p99_ms=_median(r.latency.target_p99_ms for r in good if r.latency),
            records_per_batch=_median(r.records_per_batch for r in good),
            cpu_us_per_record=cpu,
            rate=members[0].rate,
            errors=tuple(sorted({r.error for r in members if r.error})),
            unsupported=all(r.extra.get("unsupported") for r in members),
        ))
    cells.sort(key=_order)
    return cells


def find(cells: Sequence[Cell], target: str, client: str, mode: str, size: int) -> Cell | None:
    for cell in cells:
        if (cell.target, cell.client, cell.mode, cell.record_size) == (target, client, mode, size):
            return cell
    return None


@dataclass(frozen=True, slots=True)
class Ratio:
    kind: str  # "korvet/ceiling" or "korvet/kafka"
    target: str
    client: str
    mode: str
    record_size: int
    value: float
    numerator: float
    denominator: float


def ratios(cells: Sequence[Cell]) -> list[Ratio]:
    found = []
    for cell in cells:
        if cell.target not in KORVET_TARGETS or cell.client.startswith(CEILING_PREFIX):
            continue
        if cell.mode not in (PRODUCE, CONSUME) or cell.n == 0:
            continue
        references = (("korvet/ceiling", find(cells, cell.target, ceiling_client(cell.client),
                                              cell.mode, cell.record_size)),
                      ("korvet/kafka", find(cells, KAFKA, cell.client, cell.mode, cell.record_size)))
        for kind, reference in references:
            if reference is not None and reference.n and reference.median > 0:
                found.append(Ratio(kind, cell.target, cell.client, cell.mode, cell.record_size,
                                   cell.median / reference.median, cell.median, reference.median))
    return found


@dataclass(frozen=True, slots=True)
class Verdict:
    goal: str
    target: str
    client: str
    figure: str
    met: bool | None  # None: not measured in this run


TARGET_SIZE = 100


def verdicts(cells: Sequence[Cell], found_ratios: Sequence[Ratio], params: BenchParams) -> list[Verdict]:
    """The issue's targets, each judged per client on the median of the repeats."""
    out: list[Verdict] = []
    clients = params.clients

    def throughput(goal: str, target: str, mode: str, floor: float) -> None:
        for client in clients:
            cell = find(cells, target, client, mode, TARGET_SIZE)
            if cell is None or cell.n == 0:
                why = "not measured: the broker has no consumer groups" if cell and cell.unsupported \
                    else "not measured"
                out.append(Verdict(goal, target, client, why, None))
                continue
            out.append(Verdict(goal, target, client,
                               f"{cell.median:,.0f} rec/s [{cell.low:,.0f}–{cell.high:,.0f}]",
                               cell.median >= floor))

    throughput("produce ≥ 100,000 rec/s (AOF everysec)", KORVET_EMBEDDED, PRODUCE, 100_000)
    throughput("produce ≥ 150,000 rec/s (persistence off)", KORVET_NOPERSIST, PRODUCE, 150_000)
    throughput("consume ≥ 250,000 rec/s", KORVET_EMBEDDED, CONSUME, 250_000)
    for client in clients:
        cell = find(cells, KORVET_EMBEDDED, client, LATENCY, params.latency_record_size)
        goal = "produce p99 < 10 ms at 50,000 rec/s"
        if cell is None or cell.n == 0 or cell.p99_ms is None:
            out.append(Verdict(goal, KORVET_EMBEDDED, client, "not measured", None))
        elif cell.rate != 50_000:
            out.append(Verdict(goal, KORVET_EMBEDDED, client,
                               f"p99 {cell.p99_ms:.1f} ms at {cell.rate:,} rec/s (other rate)", None))
        else:
            out.append(Verdict(goal, KORVET_EMBEDDED, client,
                               f"p99 {cell.p99_ms:.1f} ms (sent {cell.median:,.0f} rec/s)",
                               cell.p99_ms < 10.0))
    for target in (KORVET_EMBEDDED, KORVET_NOPERSIST):
        for client in clients:
            goal = "produce korvet/ceiling ≥ 0.6"
            ratio = next((r for r in found_ratios if r.kind == "korvet/ceiling" and r.target == target
                          and r.client == client and r.mode == PRODUCE
                          and r.record_size == TARGET_SIZE), None)
            if ratio is None:
                out.append(Verdict(goal, target, client, "not measured", None))
            else:
                out.append(Verdict(goal, target, client,
                                   f"{ratio.value:.2f} ({ratio.numerator:,.0f} / {ratio.denominator:,.0f})",
                                   ratio.value >= 0.6))
    if params.topic_config_map.get(STORAGE_FORMAT_CONFIG) == BATCHES_FORMAT:
        out.extend(_batches_verdicts(found_ratios, params))
    return [v for v in out if v.target in params.targets]


STORAGE_FORMAT_CONFIG = "korvet.storage.format"
BATCHES_FORMAT = "batches"
# The targets of the `batches` storage format (issue 16): korvet/kafka and korvet/ceiling in
# the same run, AOF everysec, every record size and client of the run.
_BATCHES_GOALS = (("korvet/kafka", PRODUCE, 1.0, "batches produce ≥ 1.0× Kafka"),
                  ("korvet/kafka", CONSUME, 1.0, "batches consume ≥ 1.0× Kafka"),
                  ("korvet/ceiling", PRODUCE, 0.8, "batches produce korvet/ceiling ≥ 0.8"))


def _batches_verdicts(found_ratios: Sequence[Ratio], params: BenchParams) -> list[Verdict]:
    out = []
    for kind, mode, floor, goal in _BATCHES_GOALS:
        for size in params.record_sizes:
            for client in params.clients:
                sized = f"{goal} ({size:,} B)"
                ratio = next((r for r in found_ratios if r.kind == kind and r.mode == mode
                              and r.target == KORVET_EMBEDDED and r.client == client
                              and r.record_size == size), None)
                if ratio is None:
                    out.append(Verdict(sized, KORVET_EMBEDDED, client, "not measured", None))
                else:
                    out.append(Verdict(sized, KORVET_EMBEDDED, client,
                                       f"{ratio.value:.2f} ({ratio.numerator:,.0f} / "
                                       f"{ratio.denominator:,.0f})", ratio.value >= floor))
    return out


BROKER_RSS_LIMIT = 300 * 2**20  # issue 16: the broker's RSS stays under 300 MiB during every run


def memory_verdicts(runs: Sequence[Run], params: BenchParams) -> list[Verdict]:
    """The broker's peak RSS over every run of each Korvet target (``VmHWM`` read after each
    run, so the largest is the peak since the broker started), against the issue's limit."""
    out = []
    goal = f"broker RSS < {BROKER_RSS_LIMIT // 2**20} MiB during every run"
    for target in (t for t in KORVET_TARGETS if t in params.targets):
        peaks = [int(run.extra["peak_rss_bytes"]["broker"]) for run in runs
                 if run.target == target and "broker" in run.extra.get("peak_rss_bytes", {})]
        if not peaks:
            out.append(Verdict(goal, target, "all", "not measured", None))
            continue
        out.append(Verdict(goal, target, "all",
                           f"peak {max(peaks) / 2**20:,.0f} MiB (read after each of {len(peaks)} runs)",
                           max(peaks) < BROKER_RSS_LIMIT))
    return out
