"""`tidings pipeline`: windowed aggregates of JSON events from streaming channels or
JetStream streams.

    events (channels, or --stream) --> parse JSON --> watermark --> per key and event-time
                                       window: count, sum, avg, min, max of `value`
        --> Parquet files (final windows, once the watermark has passed them; exactly once)
        --> results channel, subject or stream (every update of a window as JSON; at least
            once)

An event is a JSON object such as `{"key": "sensor-7", "value": 21.5, "ts": "2026-01-02T03:04:05Z"}`
(`ts` may also be epoch milliseconds; without it the time the server stored the message is
used). Field names are options. Lines that are not such objects are skipped.

Two streaming queries share the event definition, each with its own checkpoint under
`--checkpoint` (`parquet/`, `publish/`): stop the pipeline at any point and start it again with
the same directories, and both resume at the offsets of their last completed micro-batch.

Runs on local Spark (`--master local[2]`, the default) or on a cluster (`--master
spark://host:7077`, `yarn`, ...; the executors need tidings installed, see docs/spark.md). Also
submit-able: `spark-submit path/to/tidings/spark/pipeline.py --channels events ...`, which
runs on spark-submit's master unless the script is given --master too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Absolute: this file also runs as a script (spark-submit .../pipeline.py).
from tidings.spark.options import (
    ConnectionOptions,
    OptionError,
    ReadOptions,
    Use,
    applies,
    check_names,
)

DEFAULT_URL = "nats://127.0.0.1:4222"
DEMO_STREAM = "EVENTS"  # the stream the demo feeds and reads (subjects events.>)
DEMO_RESULTS_STREAM = "RESULTS"  # the stream the demo makes for the results subject


@dataclass
class PipelineConfig:
    url: str = DEFAULT_URL
    channels: tuple[str, ...] = ("events",)
    streams: tuple[str, ...] = ()  # JetStream streams to read instead of the channels
    output: str = "pipeline-out/results"
    checkpoint: str = "pipeline-out/checkpoint"
    results_channel: str | None = "results"
    # or "core" (a core NATS subject), "jetstream" (the stream that takes the subject)
    results_target: str = "streaming"
    key_field: str = "key"
    value_field: str = "value"
    time_field: str = "ts"
    window: str = "10 seconds"
    slide: str | None = None
    watermark: str = "30 seconds"
    trigger: str = "5 seconds"  # a processing-time interval, or "availableNow"
    max_messages_per_trigger: int | None = None
    # -o options (clusterId, user, tls...), each passed to the source and/or the sink it
    # applies to
    source_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if any(key.lower() == "target" for key in self.source_options):
            raise OptionError("option target: the pipeline's sink target is --results-target")
        check_names(self.source_options, Use.STREAM_READ, Use.BATCH_WRITE, spark=False,
                    what="tidings pipeline -o (its source is a streaming read, its sink a "
                         "batch write)")
        # Their values too, before Spark starts (the source would fail its query on them).
        ReadOptions.parse({**self.nats_options(Use.STREAM_READ), **self.source()},
                          stream=True)
        ConnectionOptions.parse(self.nats_options(Use.BATCH_WRITE))

    def source(self) -> dict[str, str]:
        """What the pipeline reads: its streams (JetStream), else its channels."""
        if self.streams:
            return {"streams": ",".join(self.streams)}
        return {"channels": ",".join(self.channels)}

    def nats_options(self, use: Use) -> dict[str, str]:
        """The nats options of the pipeline's reads (`Use.STREAM_READ`, the demo's
        `Use.BATCH_READ`) or of its sink (`Use.BATCH_WRITE`)."""
        return {"url": self.url,
                **{k: v for k, v in self.source_options.items() if applies(k, use)}}


def check_streams(cfg: PipelineConfig) -> None:
    """The server answers JetStream and has every stream the pipeline reads (else the
    error naming what is missing)."""
    from tidings.spark.jscatalog import StreamCatalog

    catalog = StreamCatalog(ConnectionOptions.parse(cfg.nats_options(Use.STREAM_READ)))
    try:
        catalog.info(list(cfg.streams))
    finally:
        catalog.close()


def events(spark: Any, cfg: PipelineConfig, pause_file: str | None = None) -> Any:
    """The parsed events of the channels (or streams): (key, value, event_time, channel,
    sequence), `channel` the channel's or stream's name; `pause_file`: the source's
    pauseFile option (see `stop_gracefully`)."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format("nats").options(**cfg.source())
    for key, value in cfg.nats_options(Use.STREAM_READ).items():
        reader = reader.option(key, value)
    if pause_file:
        reader = reader.option("pauseFile", pause_file)
    if cfg.max_messages_per_trigger:
        reader = reader.option("maxMessagesPerTrigger", cfg.max_messages_per_trigger)
    raw = reader.load()
    schema = (f"`{cfg.key_field}` string, `{cfg.value_field}` double, "
              f"`{cfg.time_field}` string")
    parsed = raw.select(
        F.col("stream" if cfg.streams else "channel").alias("channel"), "sequence", "timestamp",
        F.from_json(F.col("data").cast("string"), schema).alias("e"))
    ts = F.col(f"e.`{cfg.time_field}`")
    event_time = F.coalesce(
        F.when(ts.rlike(r"^-?\d+$"), F.timestamp_millis(ts.cast("long"))),
        F.try_to_timestamp(ts),
        F.col("timestamp"),
    )
    return (parsed
            .where(F.col(f"e.`{cfg.key_field}`").isNotNull())
            .select(F.col(f"e.`{cfg.key_field}`").alias("key"),
                    F.col(f"e.`{cfg.value_field}`").alias("value"),
                    event_time.alias("event_time"), "channel", "sequence"))


def aggregates(ev: Any, cfg: PipelineConfig) -> Any:
    """Per key and window: count, sum, avg, min, max (windows close with the watermark)."""
    from pyspark.sql import functions as F

    win = (F.window("event_time", cfg.window, cfg.slide) if cfg.slide
           else F.window("event_time", cfg.window))
    return (ev.withWatermark("event_time", cfg.watermark)
            .groupBy(win.alias("window"), "key")
            .agg(F.count("*").alias("count"), F.sum("value").alias("sum"),
                 F.avg("value").alias("avg"), F.min("value").alias("min"),
                 F.max("value").alias("max"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"),
                    "key", "count", "sum", "avg", "min", "max"))


def _trigger(writer: Any, cfg: PipelineConfig) -> Any:
    if cfg.trigger.replace("_", "").lower() == "availablenow":
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=cfg.trigger)


def start(spark: Any, cfg: PipelineConfig, pause_file: str | None = None) -> list[Any]:
    """Start the Parquet query (and the publishing query); returns the StreamingQuery list.
    While `pause_file` exists, they start no micro-batch (`stop_gracefully` creates it)."""
    from pyspark.sql import functions as F

    import tidings.spark

    tidings.spark.register(spark)
    ckpt = cfg.checkpoint.rstrip("/")
    queries = []
    to_parquet = (aggregates(events(spark, cfg, pause_file), cfg).writeStream
                  .queryName("tidings_pipeline_parquet")
                  .format("parquet").outputMode("append")
                  .option("path", cfg.output)
                  .option("checkpointLocation", f"{ckpt}/parquet"))
    queries.append(_trigger(to_parquet, cfg).start())
    if cfg.results_channel:
        agg = aggregates(events(spark, cfg, pause_file), cfg)
        payload = F.to_json(F.struct(
            F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("window_start"),
            F.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("window_end"),
            "key", "count", "sum", "avg", "min", "max"))
        options = {**cfg.nats_options(Use.BATCH_WRITE), "target": cfg.results_target}

        def publish_batch(batch: Any, batch_id: int) -> None:
            # Update mode is not open to Python streaming sinks, so each micro-batch's
            # changed windows go out through the batch writer (PubAck'ed before it returns).
            (batch.select(F.lit(cfg.results_channel).alias("subject"), payload.alias("data"))
             .write.format("nats").mode("append").options(**options).save())

        publish = (agg.writeStream.queryName("tidings_pipeline_publish")
                   .outputMode("update").foreachBatch(publish_batch)
                   .option("checkpointLocation", f"{ckpt}/publish"))
        queries.append(_trigger(publish, cfg).start())
    return queries


# -- running it -------------------------------------------------------------------------


DEFAULT_MASTER = "local[2]"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def choose_master(explicit: str | None, environ: Mapping[str, str] = os.environ
                  ) -> str | None:
    """The master to build the session with; None to keep the one spark-submit configured.

    --master on the pipeline's command line wins. Under spark-submit the JVM starts first and
    hands its address to this Python in PYSPARK_GATEWAY_PORT (what pyspark itself checks); its
    conf already holds spark-submit's master (its --master, conf, or its default local[*]).
    A plain run takes a --master from PYSPARK_SUBMIT_ARGS, then $SPARK_MASTER, then local[2].
    """
    if explicit:
        return explicit
    if "PYSPARK_GATEWAY_PORT" in environ:
        return None
    args = shlex.split(environ.get("PYSPARK_SUBMIT_ARGS", ""))
    for i, arg in enumerate(args):
        if arg == "--master" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--master="):
            return arg.partition("=")[2]
    return environ.get("SPARK_MASTER") or DEFAULT_MASTER


def spark_session(master: str | None, app_name: str = "tidings-pipeline",
                  conf: dict[str, str] | None = None) -> Any:
    """A SparkSession for the pipeline (`master` None: the one already configured, see
    `choose_master`); local masters bind to the loopback interface."""
    local = master is not None and master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    settings = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false"}
    if local:
        settings["spark.ui.enabled"] = "false"
    settings.update(conf or {})
    if master is not None:
        start_jvm_apart(master, app_name, settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    set_shuffle_partitions(session, conf or {})
    return session


def start_jvm_apart(master: str, app_name: str, settings: Mapping[str, str]) -> None:
    """Start Spark's JVM as pyspark does, but in a session (process group) of its own.

    A terminal's Ctrl-C goes to its whole foreground process group. pyspark makes its JVM
    ignore SIGINT, but the Python processes the JVM starts (the streaming source runners, the
    workers) put Python's handler back: each dies in the middle of a call with a traceback,
    and the query whose task it ran fails (with its plan in the message). Apart from the
    terminal's group, the JVM and all it starts never see the signal; only this process does,
    and it stops the queries between micro-batches. The JVM still ends with this process:
    pyspark's gateway exits when its stdin, a pipe from here, closes. Does nothing when a JVM
    is there already (a session exists, or spark-submit started this process).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        conf.set(key, value)
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True,
                                                          "stderr": subprocess.PIPE})
    JVM_STDERR.pump(gateway.proc.stderr)
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


class JvmStderr:
    """What Spark's JVM (and the Python processes it starts) write to stderr, passed on to
    ours until the pipeline stops: from then on what it says is its own shutdown (a
    streaming source runner that loses its socket as the query stops prints a traceback),
    which a stop asked for with Ctrl-C does not show."""

    def __init__(self) -> None:
        self.silent = False

    def pump(self, stream: Any) -> None:
        if stream is None:
            return
        threading.Thread(target=self._copy, args=(stream,), name="jvm-stderr",
                         daemon=True).start()

    def _copy(self, stream: Any) -> None:
        out = getattr(sys.stderr, "buffer", None)
        for line in iter(stream.readline, b""):
            if self.silent:
                continue
            if out is not None:
                out.write(line)
                out.flush()
            else:
                sys.stderr.write(line.decode(errors="replace"))

    def silence(self) -> None:
        self.silent = True


JVM_STDERR = JvmStderr()


def set_shuffle_partitions(session: Any, conf: Mapping[str, str]) -> int:
    """Unless the user chose spark.sql.shuffle.partitions (--conf, spark-submit's conf or
    spark-defaults), two per core Spark has; the number the session ends up with.

    Spark's default of 200 means 200 tasks, each loading and committing its share of the
    window state, per micro-batch and stateful query: most of a batch's time when the batch is
    small (a 4,000-event first batch took 3 min 53 s on a cluster, 35 s with 4 partitions).
    Two per core keeps every core busy when keys are spread unevenly, and still gives 4 when
    a standalone cluster's executors register only after the session started (Spark then
    reports 2 cores). A checkpointed query keeps the number it started with.
    """
    if SHUFFLE_PARTITIONS not in conf and not session.sparkContext.getConf().contains(
            SHUFFLE_PARTITIONS):
        cores = max(1, session.sparkContext.defaultParallelism)
        session.conf.set(SHUFFLE_PARTITIONS, str(2 * cores))
    return int(session.conf.get(SHUFFLE_PARTITIONS))


def session_line(session: Any) -> str:
    """Where the pipeline runs, for its first output line."""
    return (f"Spark master {session.sparkContext.master}, "
            f"{session.conf.get(SHUFFLE_PARTITIONS)} shuffle partitions")


NO_WATERMARK = "1970-01-01T00:00:00.000Z"  # Spark's watermark before any event time


def offset_span(progress: dict[str, Any]) -> int | None:
    """Messages between a batch's start and end offsets, over its nats sources (channel
    sequences are contiguous); None when a start is not known."""
    total = 0
    for src in progress.get("sources") or []:
        try:
            start = json.loads(src.get("startOffset") or "null")
            end = json.loads(src.get("endOffset") or "null")
        except ValueError:
            return None
        if not isinstance(end, dict):
            continue
        if not isinstance(start, dict):
            return None
        # A channel new in `end` enters at its starting point: nothing of it is in the batch.
        total += sum(max(0, int(last) - int(start.get(ch, last))) for ch, last in end.items())
    return total


def describe(progress: dict[str, Any] | None) -> str:
    """One line of a micro-batch's progress. The events are those of its offset range: Spark
    counts only the rows it read, and a batch replayed after a restart whose sink already
    has it (the Parquet sink) reads none."""
    if not progress:
        return "starting"
    rows = progress.get("numInputRows", 0)
    span = offset_span(progress)
    events = f"{rows} events in"
    if span is not None and span != rows:
        events = f"{span} events in ({rows} read)"
    rate = progress.get("processedRowsPerSecond") or 0.0
    wm = (progress.get("eventTime") or {}).get("watermark", NO_WATERMARK)
    if wm == NO_WATERMARK:
        wm = "none yet"
    state = sum(op.get("numRowsTotal", 0) for op in progress.get("stateOperators") or [])
    sink = (progress.get("sink") or {}).get("numOutputRows", -1)
    out = f", {sink} out" if sink >= 0 else ""
    return (f"batch {progress.get('batchId')}: {events}{out}, "
            f"{rate:,.0f} rows/s, watermark {wm}, {state} windows in state")


class ProgressLog:
    """Prints each micro-batch of the queries once (Spark keeps their recent progress)."""

    def __init__(self, queries: list[Any], echo: Callable[[str], None] = print) -> None:
        self.queries = queries
        self.echo = echo
        self.printed: dict[str, int] = {}
        self.batches: dict[str, int] = {}  # printed, per query

    def report(self) -> None:
        for q in self.queries:
            for p in q.recentProgress:
                batch = p.get("batchId", -1)
                if batch > self.printed.get(q.name, -1):
                    self.printed[q.name] = batch
                    self.batches[q.name] = self.batches.get(q.name, 0) + 1
                    self.echo(f"[{q.name}] {describe(p)}")


def watch(log: ProgressLog, until: Callable[[], bool], every: float = 5.0) -> None:
    """Print every micro-batch of the log's queries (at most every `every` seconds) until
    `until()`, all stop, or one fails (RuntimeError); call `log.report()` again once they are
    stopped."""
    queries = log.queries

    def going() -> bool:
        return (not until() and any(q.isActive for q in queries)
                and not any(q.exception() is not None for q in queries if not q.isActive))

    while going():
        log.report()
        deadline = time.monotonic() + every
        while time.monotonic() < deadline and going():
            for q in queries:
                _await(q, 0.2)
    log.report()
    for q in queries:
        if q.exception() is not None:
            raise QueryFailed(q.name, str(q.exception()))


class QueryFailed(RuntimeError):
    """A query of the pipeline ended with an error (Spark's message, with its plan)."""

    def __init__(self, query: str, error: str) -> None:
        super().__init__(f"query {query} failed: {error}")
        self.query, self.error = query, error

    def line(self) -> str:
        """In one line: the Python exception Spark's message carries (the source's own
        words, e.g. `OptionError: ...`), else the message's first line."""
        raised = re.findall(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", self.error,
                            re.MULTILINE)
        what = "{}: {}".format(*raised[-1]) if raised else self.error.strip().split("\n")[0]
        return f"query {self.query} failed: {what}"


def _await(query: Any, timeout: float) -> None:
    """Wait up to `timeout` s for the query to end; its failure is `query.exception()`."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(timeout)
    except StreamingQueryException:
        pass


def stop_gracefully(queries: list[Any], pause_file: str | None = None,
                    hurry: Callable[[], bool] = lambda: False,
                    quiet: Callable[[], None] = lambda: None) -> None:
    """Stop the queries between two micro-batches: `pause_file` (the one they were started
    with) is created, so the batches under way finish and no other starts (but a batch
    without data that the watermark may ask for); each query is stopped once none of its
    triggers is active. `hurry()` true stops the rest at once: the batches it interrupts
    are replayed on restart, and `quiet()` is called first (to turn Spark's log off: it
    prints each interruption as errors, a thousand lines of Java stacks).

    Without a pause file, batches follow each other while a backlog lasts and the gap
    between two is too short to be seen: a query would be stopped midway after all.
    """
    if pause_file:
        Path(pause_file).touch()
    pending = list(queries)
    while pending:
        for q in list(pending):
            between = not q.isActive or not q.status.get("isTriggerActive")
            if between or hurry():
                if not between:
                    quiet()
                q.stop()
                pending.remove(q)
        if pending:
            _await(pending[0], 0.05)


def quiet(spark: Any) -> None:
    """Spark's log off (a stop at once: what it would say is the interruption)."""
    spark.sparkContext.setLogLevel("OFF")


class Stop:
    """SIGINT and SIGTERM (Ctrl-C, kill): the first asks for a stop between micro-batches,
    a second one for a stop at once."""

    def __init__(self) -> None:
        self.signals = 0

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        self.signals += 1

    def is_set(self) -> bool:
        return self.signals > 0

    def hurry(self) -> bool:
        return self.signals > 1


def _config_from_args(args: argparse.Namespace) -> PipelineConfig:
    extra = {}
    for item in args.option or []:
        key, _, value = item.partition("=")
        extra[key] = value
    if args.cluster_id:
        extra.setdefault("clusterId", args.cluster_id)
    demo = getattr(args, "demo", False)
    on_jetstream = demo and demo_on_jetstream(args)
    window = args.window or ("5 seconds" if demo else "10 seconds")
    watermark = args.watermark or ("5 seconds" if demo else "30 seconds")
    trigger = args.trigger or ("2 seconds" if demo else "5 seconds")
    base = "pipeline-out"
    if demo and not (args.output or args.checkpoint):
        # A demo feeds a fresh server whose channels start at sequence 1 again: an old
        # checkpoint's offsets would be ahead of them.
        base = time.strftime("pipeline-out/demo-%Y%m%d-%H%M%S")
    output = args.output or f"{base}/results"
    checkpoint = args.checkpoint or f"{base}/checkpoint"
    return PipelineConfig(
        url=args.url or DEFAULT_URL,
        channels=_names(args.channels or "events"),
        streams=_names(args.streams or (DEMO_STREAM if on_jetstream else "")),
        output=output, checkpoint=checkpoint,
        results_channel=args.results_channel or None,
        results_target=args.results_target or ("jetstream" if on_jetstream else "streaming"),
        key_field=args.key_field, value_field=args.value_field, time_field=args.time_field,
        window=window, slide=args.slide, watermark=watermark, trigger=trigger,
        max_messages_per_trigger=args.max_per_trigger, source_options=extra,
    )


def _names(text: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in text.split(",") if c.strip())


def demo_on_jetstream(args: argparse.Namespace) -> bool:
    """Whether `--demo` runs on JetStream: unless `--channels` is given (and `--streams`
    is not), which keeps the NATS Streaming demo."""
    return bool(args.streams) or args.channels is None


def configure(parser: argparse.ArgumentParser) -> None:
    """The `tidings pipeline` arguments."""
    parser.add_argument("--url", default=None,
                        help=f"NATS server with streaming (default {DEFAULT_URL}; with --demo "
                             "and no --url a tidings server is started)")
    parser.add_argument("--cluster-id", default=None, help="streaming cluster id (test-cluster)")
    parser.add_argument("--channels", default=None,
                        help="comma-separated event channels (default events; with --demo: "
                             "the demo on NATS Streaming channels instead of JetStream)")
    parser.add_argument("--streams", "--stream", dest="streams", default=None,
                        help="comma-separated JetStream streams to read instead of channels "
                             f"(the demo's default: {DEMO_STREAM})")
    parser.add_argument("--output", default=None,
                        help="Parquet directory of the final windows (default "
                             "pipeline-out/results; demo: a new pipeline-out/demo-* directory)")
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint directory, keep it to resume after a stop (default "
                             "pipeline-out/checkpoint; demo: next to its output)")
    parser.add_argument("--results-channel", default="results",
                        help="where window updates are published ('' to turn off)")
    parser.add_argument("--results-target", choices=("streaming", "core", "jetstream"),
                        default=None,
                        help="streaming (the default; the JetStream demo's: jetstream): a "
                             "channel; core: a subject; jetstream: the stream that takes the "
                             "subject --results-channel names")
    parser.add_argument("--key-field", default="key")
    parser.add_argument("--value-field", default="value")
    parser.add_argument("--time-field", default="ts")
    parser.add_argument("--window", default=None,
                        help="event-time window length (default 10 seconds; demo 5 seconds)")
    parser.add_argument("--slide", default=None, help="slide of sliding windows")
    parser.add_argument("--watermark", default=None,
                        help="allowed event lateness (default 30 seconds; demo 5 seconds)")
    parser.add_argument("--trigger", default=None,
                        help="micro-batch interval (default 5 seconds; demo 2 seconds), or "
                             "availableNow (process what is there, then stop)")
    parser.add_argument("--max-per-trigger", type=int, default=None,
                        help="at most this many events per micro-batch")
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark-submit's when run under it, else "
                             f"$SPARK_MASTER or {DEFAULT_MASTER})")
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE",
                        help="extra Spark configuration")
    parser.add_argument("-o", "--option", action="append", metavar="KEY=VALUE",
                        help="extra nats source/sink option (user, password, tlsCaFile, ...)")
    parser.add_argument("--duration", type=float, default=0,
                        help="stop after this many seconds (0: run until Ctrl-C)")
    parser.add_argument("--progress-every", type=float, default=5.0)
    parser.add_argument("--demo", action="store_true",
                        help="feed generated events while the pipeline runs (starts a tidings "
                             "server with JetStream unless --url is given; creates the streams "
                             f"it misses: {DEMO_STREAM} on {DEMO_STREAM.lower()}.>, "
                             f"{DEMO_RESULTS_STREAM} on the results subject), stop and resume "
                             "it once, and show the results; with --channels: on NATS "
                             "Streaming channels")
    parser.add_argument("--demo-rate", type=float, default=200.0, help="demo events per second")
    parser.add_argument("--demo-keys", type=int, default=8)


def run(args: argparse.Namespace) -> int:
    """`tidings pipeline`: 0 when it stopped as asked (Ctrl-C, SIGTERM, --duration, the end
    of an availableNow run), 1 on an error (one line), 2 on a refused option."""
    try:
        cfg = _config_from_args(args)
    except OptionError as exc:
        print(f"tidings pipeline: error: {exc}", file=sys.stderr)
        return 2
    if args.demo:
        return _demo(args, cfg)
    stop = Stop()
    stop.install()  # from here on, Ctrl-C stops it between micro-batches
    from tidings.spark.stan import StanError, check_server

    try:  # before Spark starts: a wrong --url (or a missing stream) is one line at once
        if cfg.streams:
            check_streams(cfg)
        else:
            check_server(cfg.nats_options(Use.STREAM_READ))
    except StanError as exc:
        print(f"tidings pipeline: error: {exc}", file=sys.stderr)
        return 1
    conf = dict(item.split("=", 1) for item in args.conf or [])
    try:
        spark = spark_session(choose_master(args.master), conf=conf)
    except KeyboardInterrupt:  # pyspark's own handler, in the moment before ours is back
        print(stopped_line(0), flush=True)
        return 0
    stop.install()  # again: the SparkContext put its own in (cancel all jobs, raise)
    with tempfile.TemporaryDirectory(prefix="tidings-pipeline-") as tmp:
        return _run_queries(spark, cfg, args, stop, os.path.join(tmp, "pause"))


def _run_queries(spark: Any, cfg: PipelineConfig, args: argparse.Namespace, stop: Stop,
                 pause_file: str) -> int:
    started = time.monotonic()
    queries = [] if stop.is_set() else start(spark, cfg, pause_file)
    where = (f"stream(s) {', '.join(cfg.streams)}" if cfg.streams
             else ", ".join(cfg.channels))
    sink = {"core": "subject", "jetstream": "JetStream subject"}.get(cfg.results_target,
                                                                     "channel")
    print(f"pipeline: {where} -> {cfg.output}"
          + (f" and {sink} {cfg.results_channel}" if cfg.results_channel else "")
          + f"; checkpoint {cfg.checkpoint}; {session_line(spark)}", flush=True)
    log = ProgressLog(queries, lambda s: print(s, flush=True))
    failed = None
    try:
        watch(log, lambda: stop.is_set() or bool(
            args.duration and time.monotonic() - started >= args.duration),
            every=args.progress_every)
    except QueryFailed as exc:
        failed = exc.line()
    finally:
        if stop.is_set():
            JVM_STDERR.silence()
        stop_gracefully(queries, pause_file, stop.hurry, lambda: quiet(spark))
        log.report()
        spark.stop()
    if failed:
        print(f"tidings pipeline: error: {failed}", file=sys.stderr)
        return 1
    print(stopped_line(log.batches.get(queries[0].name, 0) if queries else 0), flush=True)
    return 0


def stopped_line(batches: int) -> str:
    """The pipeline's last line (its micro-batches are those of the Parquet query)."""
    return f"pipeline stopped after {batches} micro-batch{'' if batches == 1 else 'es'}"


# -- the demo ----------------------------------------------------------------------------


class DemoFeeder(threading.Thread):
    """Publishes generated events (some out of order, a few too late) at a steady rate, a
    window of them every tenth of a second, round the targets (channels, or the subjects of
    streams); a subclass per protocol says how a window is published."""

    TICK = 0.1

    def __init__(self, targets: tuple[str, ...], rate: float, keys: int) -> None:
        super().__init__(name="demo-feeder", daemon=True)
        self.targets, self.rate, self.keys = targets, rate, keys
        self.where = ", ".join(targets)  # what it feeds, for the demo's output
        self.sent = 0
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        import asyncio

        try:
            asyncio.run(self._feed())
        except BaseException as exc:  # noqa: BLE001 - reported by the demo
            self.error = exc

    async def _feed(self) -> None:
        import asyncio

        rnd = random.Random(7)
        per_tick = max(1, round(self.rate * self.TICK))
        await self.open()
        try:
            while not self.halt.is_set():
                began = time.monotonic()
                now_ms = int(time.time() * 1000)
                window = [self.event(rnd, now_ms, self.sent + i) for i in range(per_tick)]
                await self.publish(window)
                self.sent += len(window)
                await asyncio.sleep(max(0.0, self.TICK - (time.monotonic() - began)))
            await self.drain()
        finally:
            await self.close()

    def event(self, rnd: random.Random, now_ms: int, n: int) -> tuple[str, str, bytes]:
        """The n-th event: (its target, its key, its JSON)."""
        lag = rnd.expovariate(1 / 800)  # mostly under a second or two late
        key = f"sensor-{rnd.randrange(self.keys)}"
        event = {"key": key, "value": round(rnd.gauss(20, 5), 2), "ts": now_ms - int(lag)}
        return self.targets[n % len(self.targets)], key, json.dumps(event).encode()

    async def open(self) -> None:
        raise NotImplementedError

    async def publish(self, window: list[tuple[str, str, bytes]]) -> None:
        raise NotImplementedError

    async def drain(self) -> None:
        """Until what was published is acknowledged."""

    async def close(self) -> None:
        raise NotImplementedError


class StreamingFeeder(DemoFeeder):
    """To NATS Streaming channels (PubAcks awaited at the end)."""

    def __init__(self, url: str, cluster_id: str, channels: tuple[str, ...], rate: float,
                 keys: int) -> None:
        super().__init__(channels, rate, keys)
        self.url, self.cluster_id = url, cluster_id
        self.sc: Any = None

    async def open(self) -> None:
        from tidings.streaming import client as stan

        self.sc = await stan.connect(self.cluster_id, f"demo-feeder-{os.getpid()}",
                                     url=self.url)

    async def publish(self, window: list[tuple[str, str, bytes]]) -> None:
        for channel, _, data in window:
            await self.sc.publish_async(channel, data)

    async def drain(self) -> None:
        import asyncio

        while self.sc.pub_acks_pending():
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        if self.sc is not None:
            await self.sc.close()


def demo_subject(pattern: str, key: str) -> str:
    """The subject an event of `key` goes to on a stream's subject `pattern` (its
    wildcards: the key)."""
    return ".".join(key if token in ("*", ">") else token for token in pattern.split("."))


class JetStreamFeeder(DemoFeeder):
    """To JetStream streams: each event a publish to its stream's subject (`events.<key>`
    for `events.>`) whose PubAck is awaited, a window at a time; a refusal stops it."""

    def __init__(self, copts: ConnectionOptions, subjects: dict[str, str], rate: float,
                 keys: int) -> None:
        super().__init__(tuple(subjects.values()), rate, keys)
        self.copts = copts
        self.where = ", ".join(f"stream {stream} (subjects {demo_subject(pattern, '<key>')})"
                               for stream, pattern in subjects.items())
        self.conn: Any = None

    async def open(self) -> None:
        from tidings.spark.connection import NatsConnection

        self.conn = NatsConnection(self.copts, "demo-feeder")
        await self.conn.connect_nats()

    async def publish(self, window: list[tuple[str, str, bytes]]) -> None:
        import asyncio

        from tidings.spark.connection import ConnectorError

        subjects = [demo_subject(pattern, key) for pattern, key, _ in window]
        acks = await asyncio.gather(*(
            self.conn.nc.request(subject, data, timeout=self.copts.request_timeout)
            for subject, (_, _, data) in zip(subjects, window, strict=True)))
        for subject, ack in zip(subjects, acks, strict=True):
            error = json.loads(ack.data).get("error")
            if error:
                raise ConnectorError(f"publish to {subject!r} refused: "
                                     f"{error.get('description')}")

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


@dataclass
class DemoStreams:
    """What the JetStream demo feeds, and where its results are stored."""

    subjects: dict[str, str]  # stream -> the subject (pattern) its events go to
    results_stream: str | None = None
    results_from: int = 1  # the first sequence of this run's results in it


def prepare_streams(cfg: PipelineConfig, timeout: float = 20.0) -> DemoStreams:
    """Wait up to `timeout` s for the server (a demo's own may be starting), check that it
    answers JetStream and create what the demo needs that it lacks: each of `cfg.streams`
    (file storage, on `<name in lower case>.>`) and, for results stored in JetStream, a
    stream on the results subject (DEMO_RESULTS_STREAM) unless one takes it. A
    ConnectorError (JetStreamError) names what failed: no server, JetStream off, a
    refusal."""
    import asyncio

    from tidings.spark.connection import NatsConnection

    copts = ConnectionOptions.parse({**cfg.nats_options(Use.BATCH_READ),
                                     "reconnectTimeout": str(timeout)})

    async def run() -> DemoStreams:
        conn = NatsConnection(copts, "demo")
        await conn.connect_nats()
        try:
            return await _ensure_streams(conn.nc, cfg, copts.request_timeout)
        finally:
            await conn.close()

    return asyncio.run(run())


async def _ensure_streams(nc: Any, cfg: PipelineConfig, timeout: float) -> DemoStreams:
    from tidings.spark.jetstream import api

    await api(nc, "INFO", None, timeout)  # (JetStream off: the error says so)
    out = DemoStreams({})
    for stream in cfg.streams:
        info = await _ensure_stream(nc, stream, f"{stream.lower()}.>", timeout)
        out.subjects[stream] = ((info.get("config") or {}).get("subjects") or [stream])[0]
    if cfg.results_channel and cfg.results_target == "jetstream":
        found = await api(nc, "STREAM.NAMES", {"subject": cfg.results_channel}, timeout)
        out.results_stream = (found.get("streams") or [DEMO_RESULTS_STREAM])[0]
        info = await _ensure_stream(nc, out.results_stream, cfg.results_channel, timeout)
        out.results_from = int((info.get("state") or {}).get("last_seq") or 0) + 1
    return out


async def _ensure_stream(nc: Any, stream: str, subject: str, timeout: float
                         ) -> dict[str, Any]:
    """`stream`'s info; created first (file storage, on `subject`) if it does not exist."""
    from tidings.spark.jetstream import STREAM_NOT_FOUND, JetStreamError, api

    try:
        return await api(nc, f"STREAM.INFO.{stream}", None, timeout)
    except JetStreamError as exc:
        if exc.err_code != STREAM_NOT_FOUND:
            raise
    return await api(nc, f"STREAM.CREATE.{stream}",
                     {"name": stream, "subjects": [subject], "storage": "file"}, timeout)


def _start_demo_server(store: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """A tidings server on a free port of 127.0.0.1, with JetStream storing under `store`
    when given."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    jetstream = ["-js", "-sd", store] if store else []
    # Apart from the terminal's process group: Ctrl-C stops the demo, which then stops it.
    proc = subprocess.Popen([sys.executable, "-m", "tidings", "server", "-a", "127.0.0.1",
                             "-p", str(port), "-q", *jetstream], start_new_session=True)
    return proc, f"nats://127.0.0.1:{port}"


def _demo_feeder(cfg: PipelineConfig, args: argparse.Namespace
                 ) -> tuple[DemoFeeder, DemoStreams | None]:
    """The feeder of the demo, once its server answers (and has the streams it needs)."""
    if cfg.streams:
        streams = prepare_streams(cfg)
        copts = ConnectionOptions.parse(cfg.nats_options(Use.BATCH_WRITE))
        return JetStreamFeeder(copts, streams.subjects, args.demo_rate, args.demo_keys), streams
    from tidings.spark.stan import wait_for_streaming

    cluster_id = cfg.source_options.get("clusterId", "test-cluster")
    wait_for_streaming(cfg.url, clusterId=cluster_id)
    return StreamingFeeder(cfg.url, cluster_id, cfg.channels, args.demo_rate,
                           args.demo_keys), None


def _demo(args: argparse.Namespace, cfg: PipelineConfig) -> int:
    from tidings.streaming.client import StanError

    server = None
    tmp = tempfile.TemporaryDirectory(prefix="tidings-pipeline-")
    if not args.url:
        store = os.path.join(tmp.name, "store") if cfg.streams else None
        server, cfg.url = _start_demo_server(store)
        print(f"demo: started a tidings server at {cfg.url}"
              + (" with JetStream (its store in a temporary directory)" if store else ""),
              flush=True)
    stop = Stop()
    stop.install()
    feeder = None
    spark = None
    pause_file = os.path.join(tmp.name, "pause")
    try:
        try:
            feeder, streams = _demo_feeder(cfg, args)
        except (StanError, TimeoutError) as exc:
            print(f"tidings pipeline: error: {exc}", file=sys.stderr, flush=True)
            return 1
        feeder.start()
        print(f"demo: feeding ~{args.demo_rate:g} events/s to {feeder.where}; "
              f"windows of {cfg.window}, watermark {cfg.watermark}, trigger {cfg.trigger}; "
              f"output {cfg.output}, checkpoint {cfg.checkpoint}", flush=True)
        conf = dict(item.split("=", 1) for item in args.conf or [])
        spark = spark_session(choose_master(args.master), conf=conf)
        stop.install()  # again: the SparkContext put its own in
        print(f"demo: {session_line(spark)}", flush=True)
        _demo_phases(spark, cfg, args, feeder, stop, pause_file)
        feeder.halt.set()
        feeder.join(30)
        if feeder.error is not None:
            print(f"demo: the feeder stopped early: {feeder.error}", flush=True)
        _summary(spark, cfg, feeder.sent, streams)
    finally:
        if feeder is not None:
            feeder.halt.set()
        if spark is not None:
            spark.stop()
        if server is not None:
            server.terminate()
            server.wait(10)
        tmp.cleanup()
    return 0


def _demo_phases(spark: Any, cfg: PipelineConfig, args: argparse.Namespace,
                 feeder: DemoFeeder, stop: Stop, pause_file: str) -> None:
    """Half the duration, a stop, and the other half resumed from the checkpoint."""
    duration = args.duration or 60.0
    echo = lambda s: print(f"  {s}  (fed {feeder.sent})", flush=True)  # noqa: E731
    for phase, share in (("first run", 0.5), ("resumed from the checkpoint", 0.5)):
        print(f"demo: {phase}", flush=True)
        Path(pause_file).unlink(missing_ok=True)
        queries = start(spark, cfg, pause_file)
        deadline = time.monotonic() + duration * share

        def done(deadline: float = deadline) -> bool:
            return stop.is_set() or time.monotonic() >= deadline

        log = ProgressLog(queries, echo)
        try:
            watch(log, done, every=args.progress_every)
        finally:
            stop_gracefully(queries, pause_file, stop.hurry, lambda: quiet(spark))
            log.report()
        if stop.is_set():
            break


SUMMARY_WINDOWS = 6


def _summary(spark: Any, cfg: PipelineConfig, fed: int,
             streams: DemoStreams | None = None) -> None:
    from pyspark.sql import functions as F

    print(f"demo: {fed} events fed", flush=True)
    out = Path(cfg.output)
    if out.exists() and any(out.glob("*.parquet")):
        final = spark.read.parquet(str(out))
        n = final.count()
        print(f"demo: {n} final windows in {out} (windows still open at the end stay in the "
              "checkpointed state until the watermark passes them)", flush=True)
        per_window = (final.groupBy("window_start", "window_end")
                      .agg(F.count("key").alias("keys"), F.sum("count").alias("count"),
                           (F.sum("sum") / F.sum("count")).alias("avg"),
                           F.min("min").alias("min"), F.max("max").alias("max"))
                      .orderBy(F.col("window_start").desc()).limit(SUMMARY_WINDOWS).collect())
        print(f"demo: the last {len(per_window)} final windows, all keys together:", flush=True)
        for r in reversed(per_window):
            print(f"  {r.window_start:%H:%M:%S}-{r.window_end:%H:%M:%S} keys={r['keys']:<3} "
                  f"count={r['count']:<6} avg={r.avg:7.2f} min={r.min:6.2f} max={r.max:6.2f}",
                  flush=True)
    else:
        print(f"demo: no window closed yet in {out}; run longer than window + watermark",
              flush=True)
    if cfg.results_channel and cfg.results_target == "streaming":
        results = (spark.read.format("nats").option("channels", cfg.results_channel)
                   .options(**cfg.nats_options(Use.BATCH_READ)).load())
        print(f"demo: {results.count()} window updates published on channel "
              f"{cfg.results_channel}", flush=True)
    elif streams is not None and streams.results_stream:
        stored = (spark.read.format("nats").options(**cfg.nats_options(Use.BATCH_READ))
                  .option("streams", streams.results_stream)
                  .option("startSequence", streams.results_from).load())
        print(f"demo: {stored.count()} window updates stored in stream "
              f"{streams.results_stream} (subject {cfg.results_channel})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidings pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
