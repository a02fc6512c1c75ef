"""PNG plots of a results file: throughput by record size, and the produce latency CDF.

The latency CDF is drawn from librdkafka's per-record delivery latencies of the
fixed-rate runs (korvet/bench/rdkafka_perf.py keeps 1,000+ quantiles of every run);
Kafka's ProducerPerformance prints only percentiles, which are drawn as markers
(p50, p95, p99, p99.9 of its steady state) on the same axes.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from . import sweep
from .model import (
    CEILING_PREFIX,
    CONSUME,
    JAVA,
    KAFKA,
    KORVET_EMBEDDED,
    KORVET_NOPERSIST,
    LATENCY,
    LIBRDKAFKA,
    PRODUCE,
    Run,
)
from .runner import BenchResult
from .summary import Cell, summarize

THROUGHPUT_PNG = "bench-throughput.png"
LATENCY_PNG = "bench-latency-cdf.png"

_COLORS = {KORVET_EMBEDDED: "#1f77b4", KORVET_NOPERSIST: "#2ca02c", KAFKA: "#ff7f0e"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series_label(cell: Cell) -> str:
    if cell.client.startswith(CEILING_PREFIX):
        return f"{cell.target}: ceiling ({cell.client.removeprefix(CEILING_PREFIX)} batches)"
    return f"{cell.target}: {cell.client}"


def plot_throughput(result: BenchResult, path: Path) -> None:
    plt = _pyplot()
    cells = [c for c in summarize(result.runs) if c.mode in (PRODUCE, CONSUME) and c.n > 0]
    sizes = sorted({c.record_size for c in cells}) or list(result.params.record_sizes)
    figure, axes = plt.subplots(1, 2, figsize=(14, 6), sharey=True)
    for axis, mode in zip(axes, (PRODUCE, CONSUME), strict=True):
        mode_cells = [c for c in cells if c.mode == mode]
        series: list[tuple[str, str]] = []
        for cell in mode_cells:
            if (cell.target, cell.client) not in series:
                series.append((cell.target, cell.client))
        width = 0.84 / max(1, len(series))
        for index, (target, client) in enumerate(series):
            xs, ys, low, high = [], [], [], []
            label = ""
            for position, size in enumerate(sizes):
                found = next((c for c in mode_cells if (c.target, c.client, c.record_size)
                              == (target, client, size)), None)
                if found is None:
                    continue
                label = _series_label(found)
                xs.append(position - 0.42 + width * (index + 0.5))
                ys.append(found.median)
                low.append(found.median - found.low)
                high.append(found.high - found.median)
            ceiling = client.startswith(CEILING_PREFIX)
            base = client.removeprefix(CEILING_PREFIX)
            axis.bar(xs, ys, width=width * 0.95, yerr=[low, high], capsize=3, label=label,
                     color=_COLORS.get(target, "#7f7f7f"),
                     alpha=0.55 if base == LIBRDKAFKA else 0.95,
                     hatch="//" if ceiling else None, edgecolor="black", linewidth=0.4)
        axis.set_xticks(range(len(sizes)), [f"{s:,} B" for s in sizes])
        axis.set_yscale("log")
        axis.set_title(f"{mode}: records/s (median, bars = min–max)")
        axis.set_xlabel("record size")
        axis.grid(axis="y", which="both", alpha=0.3)
    axes[0].set_ylabel("records per second (log scale)")
    handles, labels = axes[0].get_legend_handles_labels()
    more_handles, more_labels = axes[1].get_legend_handles_labels()
    for handle, label in zip(more_handles, more_labels, strict=True):
        if label not in labels:
            handles.append(handle)
            labels.append(label)
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    figure.suptitle(f"korvet bench: {result.params.partitions} partition(s), acks={result.params.acks}, "
                    f"batch.size={result.params.batch_size:,}, compression={result.params.compression}")
    figure.tight_layout(rect=(0, 0.14, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _median_run(runs: list[Run]) -> Run | None:
    """The repeat whose p99 is the median one (so the curve is a real run, not a blend)."""
    measured = [r for r in runs if r.ok and r.latency is not None]
    if not measured:
        return None
    measured.sort(key=lambda r: r.latency.target_p99_ms if r.latency else 0.0)
    return measured[(len(measured) - 1) // 2]


def plot_latency_cdf(result: BenchResult, path: Path) -> None:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(9, 6))
    latency_runs = [r for r in result.runs if r.mode == LATENCY and not r.extra.get("profiled")]
    targets = [t for t in result.params.targets if any(r.target == t for r in latency_runs)]
    drawn = False
    for target in targets:
        color = _COLORS.get(target, "#7f7f7f")
        chosen = _median_run([r for r in latency_runs if r.target == target and r.client == LIBRDKAFKA])
        if chosen is not None and chosen.latency is not None and chosen.latency.cdf:
            points = [(ms, q) for ms, q in chosen.latency.cdf if 0.0 < q < 1.0 and ms > 0]
            axis.plot([p[0] for p in points], [p[1] for p in points], color=color,
                      label=f"{target}: librdkafka delivery latency (repeat {chosen.repeat + 1})")
            drawn = True
        java = [r for r in latency_runs if r.target == target and r.client == JAVA and r.ok and r.latency]
        if java:
            marks = []
            for q, attr in ((0.5, "p50_ms"), (0.95, "p95_ms"), (0.99, "p99_ms"), (0.999, "p999_ms")):
                steady = f"steady_{attr}"
                values = [getattr(r.latency, steady) if getattr(r.latency, steady) is not None
                          else getattr(r.latency, attr) for r in java]
                marks.append((statistics.median(values), q))
            axis.plot([m[0] for m in marks], [m[1] for m in marks], linestyle="none", marker="o",
                      markerfacecolor="white", color=color,
                      label=f"{target}: ProducerPerformance p50/p95/p99/p99.9 (median of repeats)")
            drawn = True
    axis.set_xscale("log")
    axis.set_yscale("logit")
    axis.set_xlabel("produce latency, ms (log scale): produce() to acknowledgement")
    axis.set_ylabel("fraction of records at or below")
    axis.axvline(10.0, color="red", linestyle=":", linewidth=1, label="10 ms (the p99 target)")
    axis.grid(which="both", alpha=0.3)
    rate = result.params.latency_rate
    axis.set_title(f"produce latency CDF at {rate:,} rec/s, {result.params.latency_record_size} B records")
    if drawn:
        axis.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_all(result: BenchResult, folder: Path) -> list[Path]:
    paths = [folder / THROUGHPUT_PNG, folder / LATENCY_PNG]
    plot_throughput(result, paths[0])
    plot_latency_cdf(result, paths[1])
    cells = sweep.sweep_cells(result.runs)
    if cells:
        params = result.params
        paths.append(folder / sweep.PNG)
        sweep.plot(cells, paths[-1], f"produce throughput against batch.size: "
                   f"{cells[0].record_size:,} B records, acks={params.acks}, linger.ms="
                   f"{params.linger_ms}, compression={params.compression}", _pyplot())
    return paths
