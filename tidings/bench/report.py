"""Output of bench results: rich tables on the console, a JSON document, a CSV file."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tidings.bench.results import LatencyResult, MemoryResult, Result, ThroughputResult
from tidings.bench.runner import format_size

CPU_NOTE = ("CPU in % of one core: srv = the server (needs --server-pid), pub/sub/client = the "
            "load generator processes, other = the rest of the machine (noise)")
CSV_COLUMNS = (
    "kind", "label", "workload", "size", "subs", "sent", "delivered", "secs", "msgs_per_s",
    "mib_per_s", "count", "median_us", "p90_us", "p99_us", "p999_us", "min_us", "max_us",
    "conns", "subs_per_conn", "opened", "baseline_mib", "rss_mib", "hwm_mib", "server_cpu",
    "pub_cpu", "sub_cpu", "client_cpu", "other_cpu", "errors",
)


def fmt_num(x: float | None, digits: int = 0) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:,.{digits}f}"


def fmt_cpu(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def _notes(errors: list[str]) -> str:
    if not errors:
        return ""
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"[red]{errors[0].splitlines()[0][:70]}{more}[/red]"


def throughput_table(results: Sequence[ThroughputResult]) -> Table:
    table = Table(title="Throughput", title_justify="left")
    for name in ("workload", "payload", "msgs", "secs", "msgs/s", "MiB/s"):
        table.add_column(name, justify="left" if name == "workload" else "right")
    for name in ("srv", "pub", "sub", "other"):
        table.add_column(f"{name} cpu", justify="right")
    table.add_column("notes")
    for r in results:
        table.add_row(r.label, format_size(r.size), f"{r.delivered:,}", f"{r.secs:.2f}",
                      fmt_num(r.msgs_per_s), fmt_num(r.mib_per_s, 1), fmt_cpu(r.server_cpu),
                      fmt_cpu(r.pub_cpu), fmt_cpu(r.sub_cpu), fmt_cpu(r.other_cpu),
                      _notes(r.errors))
    return table


def latency_table(results: Sequence[LatencyResult]) -> Table:
    table = Table(title="Request/reply latency (µs)", title_justify="left")
    for name in ("workload", "payload", "requests", "median", "p90", "p99", "p99.9", "max",
                 "srv cpu", "client cpu", "other cpu"):
        table.add_column(name, justify="left" if name == "workload" else "right")
    table.add_column("notes")
    for r in results:
        table.add_row(r.label, format_size(r.size), f"{r.count:,}", fmt_num(r.median_us, 1),
                      fmt_num(r.p90_us, 1), fmt_num(r.p99_us, 1), fmt_num(r.p999_us, 1),
                      fmt_num(r.max_us, 1), fmt_cpu(r.server_cpu), fmt_cpu(r.client_cpu),
                      fmt_cpu(r.other_cpu), _notes(r.errors))
    return table


def memory_table(results: Sequence[MemoryResult]) -> Table:
    table = Table(title="Server memory with idle subscribers", title_justify="left")
    for name in ("conns", "subs/conn", "opened", "setup s", "RSS before MiB", "RSS MiB",
                 "peak MiB"):
        table.add_column(name, justify="right")
    table.add_column("notes")
    for r in results:
        table.add_row(f"{r.conns:,}", str(r.subs_per_conn), f"{r.opened:,}",
                      fmt_num(r.setup_secs, 1), fmt_num(r.baseline_mib, 1),
                      fmt_num(r.rss_mib, 1), fmt_num(r.hwm_mib, 1), _notes(r.errors))
    return table


def print_results(console: Console, results: Sequence[Result]) -> None:
    throughput = [r for r in results if isinstance(r, ThroughputResult)]
    latency = [r for r in results if isinstance(r, LatencyResult)]
    memory = [r for r in results if isinstance(r, MemoryResult)]
    if throughput:
        console.print(throughput_table(throughput))
    if latency:
        console.print(latency_table(latency))
    if memory:
        console.print(memory_table(memory))
    if throughput or latency:
        console.print(f"[dim]{CPU_NOTE}[/dim]")


def write_json(path: str | Path, doc: dict[str, object]) -> None:
    def clean(x: object) -> object:  # NaN is not JSON
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    Path(path).write_text(json.dumps(clean(doc), indent=2, default=str) + "\n")


def write_csv(path: str | Path, results: Sequence[Result]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in results:
            row = r.to_dict()
            row["errors"] = "; ".join(str(e).splitlines()[0] for e in r.errors)
            writer.writerow(row)
