"""The `tidings pipeline` job: event-time windows to Parquet and to a results channel."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tidings.spark.options import OptionError, Use
from tidings.spark.pipeline import PipelineConfig, start

from .conftest import publish

BASE_MS = 1_700_000_000_000  # a multiple of 10 s: windows start here


def _event(key: str, value: float, at_s: float) -> bytes:
    return json.dumps({"key": key, "value": value, "ts": BASE_MS + int(at_s * 1000)}).encode()


def _run(spark, cfg):
    queries = start(spark, cfg)
    for q in queries:
        assert q.awaitTermination(180), f"{q.name} did not finish"
        assert q.exception() is None


def _parquet(spark, path):
    return sorted(
        (r.window_start.replace(tzinfo=None), r.key, r["count"], r.sum, r.min, r.max)
        for r in spark.read.parquet(str(path)).collect())


def _utc_naive(index: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(BASE_MS / 1000 + 10 * index, dt.timezone.utc).replace(
        tzinfo=None)


def _results(spark, server, channel):
    df = (spark.read.format("nats").option("url", server.url).option("channels", channel)
          .load())
    return [json.loads(bytes(r.data)) for r in df.orderBy("sequence").collect()]


def test_pipeline_windows_resume_from_checkpoint(spark, stan_server, channel_name, tmp_path):
    events, results = channel_name("events"), channel_name("results")
    publish(stan_server.url, events, [
        _event("k1", 1, 1), _event("k1", 2, 4), _event("k2", 10, 7), _event("k1", 3, 9.5),
        b"not json at all", b'{"no": "key"}',
        _event("k1", 5, 12),
        _event("k1", 100, 35),  # moves the watermark to 30 s: windows 0 and 1 are final
    ])
    cfg = PipelineConfig(url=stan_server.url, channels=(events,),
                         output=str(tmp_path / "out"), checkpoint=str(tmp_path / "ckpt"),
                         results_channel=results, window="10 seconds", watermark="5 seconds",
                         trigger="availableNow")
    _run(spark, cfg)
    w0, w1, w3 = _utc_naive(0), _utc_naive(1), _utc_naive(3)
    assert _parquet(spark, cfg.output) == [
        (w0, "k1", 3, 6.0, 1.0, 3.0), (w0, "k2", 1, 10.0, 10.0, 10.0),
        (w1, "k1", 1, 5.0, 5.0, 5.0)]
    published = {(r["window_start"], r["key"]): (r["count"], r["sum"])
                 for r in _results(spark, stan_server, results)}
    # Update mode publishes open windows too (window 3 is not final yet).
    assert published == {
        (f"{w0.isoformat()}.000Z", "k1"): (3, 6.0), (f"{w0.isoformat()}.000Z", "k2"): (1, 10.0),
        (f"{w1.isoformat()}.000Z", "k1"): (1, 5.0), (f"{w3.isoformat()}.000Z", "k1"): (1, 100.0)}

    # Stopped; more events arrive; the same checkpoint resumes where it stopped.
    publish(stan_server.url, events, [
        _event("k2", 7, 36), _event("k1", 1, 2),  # the latter is too late: dropped
        _event("k3", 0, 50),  # watermark 45 s: window 3 is final
    ])
    _run(spark, cfg)
    assert _parquet(spark, cfg.output) == [
        (w0, "k1", 3, 6.0, 1.0, 3.0), (w0, "k2", 1, 10.0, 10.0, 10.0),
        (w1, "k1", 1, 5.0, 5.0, 5.0),
        (w3, "k1", 1, 100.0, 100.0, 100.0), (w3, "k2", 1, 7.0, 7.0, 7.0)]
    updates = _results(spark, stan_server, results)
    assert len(updates) == 4 + 2  # window 3 of k2 and window 5 of k3, each published once
    assert {(u["key"], u["count"]) for u in updates[4:]} == {("k2", 1), ("k3", 1)}


def test_cli_wiring():
    from tidings.cli import build_parser
    from tidings.spark.pipeline import _config_from_args

    args = build_parser().parse_args([
        "pipeline", "--url", "nats://h:1", "--channels", "a, b", "--window", "1 minute",
        "--results-channel", "", "-o", "user=u", "--cluster-id", "c", "--trigger",
        "availableNow"])
    cfg = _config_from_args(args)
    assert args.func.__name__ == "_cmd_pipeline"
    assert cfg.channels == ("a", "b") and cfg.window == "1 minute"
    assert cfg.watermark == "30 seconds" and cfg.trigger == "availableNow"
    assert cfg.results_channel is None
    assert (cfg.output, cfg.checkpoint) == ("pipeline-out/results", "pipeline-out/checkpoint")
    demo = _config_from_args(build_parser().parse_args(["pipeline", "--demo"]))
    assert demo.output.startswith("pipeline-out/demo-") and demo.window == "5 seconds"
    # The demo runs on JetStream unless given channels.
    assert (demo.streams, demo.results_target) == (("EVENTS",), "jetstream")
    stan_demo = _config_from_args(build_parser().parse_args(
        ["pipeline", "--demo", "--channels", "ev"]))
    assert (stan_demo.channels, stan_demo.streams, stan_demo.results_target) == (
        ("ev",), (), "streaming")
    for flag in ("--stream", "--streams"):
        streams = _config_from_args(build_parser().parse_args(
            ["pipeline", flag, "ORDERS, PAYMENTS", "--results-target", "jetstream"]))
        assert streams.streams == ("ORDERS", "PAYMENTS")
        assert streams.source() == {"streams": "ORDERS,PAYMENTS"}
        assert streams.results_target == "jetstream"
    assert cfg.streams == () and cfg.results_target == "streaming"
    for use in (Use.STREAM_READ, Use.BATCH_WRITE):
        assert cfg.nats_options(use) == {"url": "nats://h:1", "user": "u", "clusterId": "c"}


def test_cli_options_go_where_they_apply_and_misspelt_ones_are_refused(capsys):
    from tidings.cli import build_parser
    from tidings.spark.pipeline import _config_from_args, run

    def parse(*options: str):
        return build_parser().parse_args(
            ["pipeline", "--url", "nats://h:1", *[a for o in options for a in ("-o", o)]])

    for typo, meant in (("maxInFligth=5", "maxInFlight"), ("pubAckWiat=5", "pubAckWait")):
        with pytest.raises(OptionError, match=re.escape(
                f"unknown option {typo.split('=')[0]!r} for tidings pipeline -o (its source is "
                f"a streaming read, its sink a batch write) (did you mean {meant}?); valid "
                "options: channels,")):
            _config_from_args(parse(typo))
    with pytest.raises(OptionError, match="for batch reads, not for tidings pipeline -o"):
        _config_from_args(parse("endSequence=9"))
    with pytest.raises(OptionError, match="--results-target"):
        _config_from_args(parse("target=core"))
    # The command stops there, before Spark starts.
    assert run(parse("maxInFligth=5")) == 2
    assert "did you mean maxInFlight?" in capsys.readouterr().err

    cfg = _config_from_args(parse("fetch=false", "pubAckWait=20", "user=u",
                                  "startingOffsets=latest"))
    assert cfg.nats_options(Use.STREAM_READ) == {
        "url": "nats://h:1", "fetch": "false", "user": "u", "startingOffsets": "latest"}
    assert cfg.nats_options(Use.BATCH_WRITE) == {
        "url": "nats://h:1", "pubAckWait": "20", "user": "u"}
    assert cfg.nats_options(Use.BATCH_READ) == {"url": "nats://h:1", "fetch": "false",
                                                "user": "u"}


def _progress(batch, rows, start, end, watermark="1970-01-01T00:00:00.000Z"):
    """A progress report as Spark gives it (fields the pipeline reads)."""
    return {"batchId": batch, "numInputRows": rows, "processedRowsPerSecond": 10.0,
            "eventTime": {"watermark": watermark},
            "stateOperators": [{"numRowsTotal": 4}],
            "sources": [{"description": "PythonMicroBatchStream", "numInputRows": rows,
                         "startOffset": json.dumps(start), "endOffset": json.dumps(end)}]}


def test_progress_line_counts_the_batch_range():
    from tidings.spark.pipeline import describe

    first = describe(_progress(0, 301, {"ev": 0}, {"ev": 301}))
    assert first.startswith("batch 0: 301 events in,") and "watermark none yet" in first
    # A batch replayed after a restart whose Parquet sink already has it: Spark reads no row.
    replayed = describe(_progress(3, 0, {"ev": 301}, {"ev": 602, "new": 7},
                                  "2023-11-14T22:13:45.000Z"))
    assert replayed.startswith("batch 3: 301 events in (0 read),")
    assert "watermark 2023-11-14T22:13:45.000Z" in replayed
    assert describe(_progress(0, 5, None, {"ev": 5})).startswith("batch 0: 5 events in,")


def test_every_batch_and_every_final_window_are_printed(spark, stan_server, channel_name,
                                                        tmp_path, capsys):
    import re

    from tidings.spark.pipeline import ProgressLog, _summary, watch

    events = channel_name("events")
    evs = [_event(f"k{i % 4}", i, w * 10 + i % 10) for w in range(3) for i in range(4)]
    evs.append(_event("k0", 0, 40))  # watermark 35 s: windows 0, 1 and 2 are final
    publish(stan_server.url, events, evs)
    cfg = PipelineConfig(url=stan_server.url, channels=(events,),
                         output=str(tmp_path / "out"), checkpoint=str(tmp_path / "ckpt"),
                         results_channel=channel_name("results"), window="10 seconds",
                         watermark="5 seconds", trigger="availableNow",
                         max_messages_per_trigger=4,
                         # each goes only to the source or the sink it applies to
                         source_options={"fetch": "false", "pubAckWait": "20",
                                         "connectTimeout": "4"})
    lines: list[str] = []
    log = ProgressLog(start(spark, cfg), lines.append)
    watch(log, lambda: False, every=600)  # one report at the end must still show them all
    for q in log.queries:
        got = [(int(b), int(n)) for b, n in
               re.findall(rf"\[{q.name}\] batch (\d+): (\d+) events in", "\n".join(lines))]
        assert [b for b, _ in got] == sorted({p["batchId"] for p in q.recentProgress})
        assert sum(n for _, n in got) == len(evs) and len(got) >= 4
    _summary(spark, cfg, len(evs))
    out = capsys.readouterr().out
    for w in range(3):
        assert f"{_utc_naive(w):%H:%M:%S}-{_utc_naive(w + 1):%H:%M:%S} keys=4   count=4 " in out


def test_master_comes_from_the_command_line_then_spark_submit_then_defaults():
    from tidings.spark.pipeline import choose_master

    submitted = {"PYSPARK_GATEWAY_PORT": "40000", "SPARK_MASTER": "spark://env:7077"}
    assert choose_master("local[3]", submitted) == "local[3]"
    assert choose_master(None, submitted) is None  # keep spark-submit's
    assert choose_master(None, {"PYSPARK_SUBMIT_ARGS": "--master yarn pyspark-shell",
                                "SPARK_MASTER": "spark://env:7077"}) == "yarn"
    assert choose_master(None, {"PYSPARK_SUBMIT_ARGS": "--master=local[5] pyspark-shell"}) \
        == "local[5]"
    assert choose_master(None, {"SPARK_MASTER": "spark://env:7077"}) == "spark://env:7077"
    assert choose_master(None, {}) == "local[2]"


def test_shuffle_partitions_the_user_chose_are_kept(spark):
    from tidings.spark.pipeline import SHUFFLE_PARTITIONS, set_shuffle_partitions

    # The shared session was built with 2; two per core would be 4 on local[2].
    assert spark.sparkContext.defaultParallelism == 2
    assert set_shuffle_partitions(spark, {}) == 2
    assert spark.conf.get(SHUFFLE_PARTITIONS) == "2"


def test_spark_submit_master_and_shuffle_partitions(stan_server, channel_name, tmp_path):
    import pyspark

    import tidings
    from tidings.spark import pipeline

    events = channel_name("events")
    publish(stan_server.url, events, [_event("k1", 1, 1), _event("k1", 2, 30)])
    root = str(Path(tidings.__file__).resolve().parents[1])
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    env.pop("SPARK_MASTER", None)  # the script's old default would have won over --master
    proc = subprocess.run(
        [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", "local[1]",
         "--conf", "spark.ui.enabled=false", pipeline.__file__,
         "--url", stan_server.url, "--channels", events, "--results-channel", "",
         "--trigger", "availableNow", "--window", "10 seconds", "--watermark", "1 second",
         "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ckpt")],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # spark-submit's master, and two shuffle partitions per core of it
    assert "; Spark master local[1], 2 shuffle partitions" in proc.stdout, proc.stdout
    assert "batch 0: 2 events in" in proc.stdout, proc.stdout


def _pipeline_cmd(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "tidings", "pipeline", "--url", url, *args]


def _pipeline_env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


def _batch_ids(ckpt: Path, kind: str) -> set[str]:
    return {p.name for p in (ckpt / kind).iterdir() if p.name.isdigit()}


def test_ctrl_c_stops_between_micro_batches_with_one_line(stan_server, channel_name, tmp_path):
    """Ctrl-C as a terminal sends it: SIGINT to the whole process group (Spark's JVM and the
    Python processes it starts included), while micro-batches follow each other."""
    events = channel_name("events")
    publish(stan_server.url, events, [_event(f"k{i % 5}", i, i / 10) for i in range(3000)])
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen(
        _pipeline_cmd(stan_server.url, "--channels", events, "--results-channel",
                      channel_name("results"), "--max-per-trigger", "150",
                      "--trigger", "0 seconds", "--progress-every", "0.2",
                      "--window", "10 seconds", "--watermark", "5 seconds",
                      "--output", str(tmp_path / "out"), "--checkpoint", str(ckpt)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
        env=_pipeline_env(), start_new_session=True)
    assert proc.stdout is not None
    before = []
    try:
        for line in proc.stdout:
            before.append(line)
            if line.startswith("[tidings_pipeline_parquet] batch 0:"):
                os.killpg(proc.pid, signal.SIGINT)
                break
        after = proc.stdout.read().splitlines()
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = "".join(before) + "\n".join(after)
    assert before and before[-1].startswith("[tidings_pipeline_parquet] batch 0:"), output
    assert code == 0, output
    assert "Traceback" not in output and "Exception" not in output, output
    # Only the progress of the batches that finished, and the one last line.
    others = [line for line in after if not line.startswith("[tidings_pipeline_")]
    assert len(others) == 1 and re.fullmatch(
        r"pipeline stopped after \d+ micro-batch(es)?", others[0]), output
    assert after[-1] == others[0]
    parquet_batches = [line for line in before + after
                       if line.startswith("[tidings_pipeline_parquet] batch ")]
    n = len(parquet_batches)
    assert others[0] == f"pipeline stopped after {n} micro-batch{'' if n == 1 else 'es'}"
    # Between micro-batches: every batch planned was committed, none was cut short.
    for query in ("parquet", "publish"):
        assert _batch_ids(ckpt / query, "offsets") == _batch_ids(ckpt / query, "commits")


def test_a_wrong_url_or_cluster_id_is_one_line_before_spark_starts(stan_server, tmp_path,
                                                                   refused_port):
    nowhere = f"nats://127.0.0.1:{refused_port}"
    for args, error in (
            ((nowhere,), f"cannot connect to {nowhere}: connection refused"),
            ((stan_server.url, "-o", "clusterId=nope"),
             f"no NATS Streaming server with cluster id 'nope' answers at {stan_server.url} "
             "(clusterId)")):
        proc = subprocess.run(_pipeline_cmd(*args), capture_output=True, text=True,
                              cwd=tmp_path, env=_pipeline_env(), timeout=120)
        assert (proc.returncode, proc.stdout, proc.stderr) == (
            1, "", f"tidings pipeline: error: {error}\n")
    # An option value the source would refuse once its query runs: refused up front.
    proc = subprocess.run(_pipeline_cmd(stan_server.url, "-o", "connectTimeout=abc"),
                          capture_output=True, text=True, cwd=tmp_path, env=_pipeline_env(),
                          timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", "tidings pipeline: error: option connectTimeout: not a number: 'abc'\n")
    assert list(tmp_path.iterdir()) == []  # nothing made: no pipeline-out, no checkpoint


def test_a_failed_query_ends_it_with_its_error_in_the_last_line(stan_server, channel_name,
                                                                 tmp_path):
    # The source refuses channelPattern without monitorUrl only once its query starts.
    proc = subprocess.run(
        _pipeline_cmd(stan_server.url, "--channels", channel_name("events"), "-o",
                      "channelPattern=nothing.*", "--output", str(tmp_path / "out"),
                      "--checkpoint", str(tmp_path / "ckpt")),
        capture_output=True, text=True, cwd=tmp_path, env=_pipeline_env(), timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == (
        "tidings pipeline: error: query tidings_pipeline_parquet failed: OptionError: option "
        "channelPattern needs option monitorUrl (the streaming server's monitoring address, "
        "e.g. http://127.0.0.1:8222)"), proc.stderr[-3000:]


def test_pipeline_reads_a_jetstream_stream_and_writes_its_results_to_one(spark, tmp_path):
    """--streams and --results-target jetstream: the windows of the events of a stream,
    their updates stored in the stream that takes the results subject."""
    import asyncio

    import nats

    from tests.harness import start_tidings

    server = start_tidings(extra_args=["-js", "-sd", str(tmp_path / "js")])
    try:
        async def fill() -> None:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            await js.add_stream(name="EVENTS", subjects=["events.>"])
            await js.add_stream(name="RESULTS", subjects=["results"])
            for data in (_event("k1", 1, 1), _event("k1", 2, 4), _event("k2", 10, 7),
                         b"not json", _event("k1", 100, 35)):
                await js.publish("events.in", data)
            await nc.close()

        asyncio.run(fill())
        cfg = PipelineConfig(url=server.url, streams=("EVENTS",),
                             output=str(tmp_path / "out"), checkpoint=str(tmp_path / "ckpt"),
                             results_channel="results", results_target="jetstream",
                             window="10 seconds", watermark="5 seconds",
                             trigger="availableNow")
        _run(spark, cfg)
        w0 = _utc_naive(0)
        assert _parquet(spark, cfg.output) == [
            (w0, "k1", 2, 3.0, 1.0, 2.0), (w0, "k2", 1, 10.0, 10.0, 10.0)]
        stored = (spark.read.format("nats").option("url", server.url)
                  .option("streams", "RESULTS").load().collect())
        published = {(json.loads(bytes(r.data))["key"], json.loads(bytes(r.data))["count"])
                     for r in stored}
        assert published == {("k1", 2), ("k2", 1), ("k1", 1)}
    finally:
        server.stop()


# -- the demo, on JetStream ------------------------------------------------------------------

DEMO_ARGS = ("--duration", "8", "--window", "2 seconds", "--watermark", "1 second",
             "--trigger", "1 second", "--progress-every", "2")


def _demo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`tidings pipeline --demo` run briefly in `tmp_path`: the process, and the figures of
    its summary (events fed, final windows and their directory, results stored)."""
    proc = subprocess.run([sys.executable, "-m", "tidings", "pipeline", "--demo", *DEMO_ARGS,
                           *args], capture_output=True, text=True, cwd=tmp_path,
                          env=_pipeline_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    figures: dict[str, Any] = {"fed": int(re.search(r"^demo: (\d+) events fed$", out, re.M)[1])}
    windows = re.search(r"^demo: (\d+) final windows in (\S+) ", out, re.M)
    assert windows, out
    figures["windows"], figures["output"] = int(windows[1]), tmp_path / windows[2]
    stored = re.search(r"^demo: (\d+) window updates stored in stream (\w+) \(subject "
                       r"results\)$", out, re.M)
    assert stored, out
    figures["results"], figures["results_stream"] = int(stored[1]), stored[2]
    return proc, figures


@pytest.mark.timeout(600)  # (Spark starts in the demo's own process)
def test_the_demo_runs_on_jetstream(spark, tmp_path):
    """By default the demo starts a server with JetStream, feeds a stream, reads it and
    stores the window updates in a stream: each run of its two is counted from there."""
    proc, got = _demo(tmp_path)
    assert "with JetStream" in proc.stdout
    assert "to stream EVENTS (subjects events.<key>)" in proc.stdout
    assert got["fed"] > 0 and got["windows"] > 0 and got["results"] > 0
    assert got["results_stream"] == "RESULTS"
    assert "Traceback" not in proc.stdout + proc.stderr
    final = spark.read.parquet(str(got["output"]))
    assert final.count() == got["windows"]
    assert final.where("count > 0").count() == got["windows"]


def _js_state(url: str, stream: str) -> dict[str, Any]:
    import asyncio

    import nats

    async def run() -> dict[str, Any]:
        nc = await nats.connect(url)
        try:
            reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
            return json.loads(reply.data)
        finally:
            await nc.close()

    return asyncio.run(run())


@pytest.mark.timeout(600)  # (Spark starts in the demo's own process)
def test_the_demo_on_a_users_nats_server_makes_the_streams_it_lacks(tmp_path):
    from tests.harness import start_reference

    server = start_reference(extra_args=["-js", "-sd", str(tmp_path / "js")])
    try:
        _, got = _demo(tmp_path, "--url", server.url)
        events, results = _js_state(server.url, "EVENTS"), _js_state(server.url, "RESULTS")
        assert events["config"]["subjects"] == ["events.>"]
        assert events["config"]["storage"] == results["config"]["storage"] == "file"
        assert results["config"]["subjects"] == ["results"]
        assert events["state"]["messages"] == got["fed"]
        assert results["state"]["messages"] == got["results"] > 0
        # what Spark read left nothing behind
        assert events["state"]["consumer_count"] == 0
        # Once more: the streams are there, and only this run's results are counted.
        _, again = _demo(tmp_path, "--url", server.url)
        assert _js_state(server.url, "RESULTS")["state"]["messages"] == (
            got["results"] + again["results"])
    finally:
        server.stop()


def test_the_demo_says_so_when_the_server_has_no_jetstream(stan_server, tmp_path):
    proc = subprocess.run(_pipeline_cmd(stan_server.url, "--demo", "--duration", "1"),
                          capture_output=True, text=True, cwd=tmp_path, env=_pipeline_env(),
                          timeout=120)
    assert (proc.returncode, proc.stderr) == (
        1, "tidings pipeline: error: no JetStream answers $JS.API.INFO (is JetStream enabled "
           "on the server and in the account?)\n")


def _make_run_command() -> list[str]:
    """The command line of `make run` (the Makefile's), with this interpreter."""
    makefile = (Path(__file__).resolve().parents[3] / "Makefile").read_text()
    recipe = re.search(r"^run:.*\n\t(.+)$", makefile, re.M)
    assert recipe, "no run target in the Makefile"
    argv = shlex.split(recipe[1])
    assert argv[0] == "$(VENV)/bin/tidings", argv
    return [sys.executable, "-m", "tidings", *argv[1:]]


def test_make_run_serves_streaming_and_jetstream_from_data(tmp_path):
    """`make run`'s server, on a port of its own and 127.0.0.1: NATS Streaming answers,
    and JetStream, both storing under ./data."""
    import asyncio

    import nats

    from tests.harness import Process

    argv = _make_run_command()
    assert argv[argv.index("--port") + 1] == "4222" and "./data" in argv
    argv[argv.index("--port") + 1] = "-1"
    argv[argv.index("--addr") + 1] = "127.0.0.1"
    server = Process(argv, kind="tidings", cwd=tmp_path)
    try:
        server.wait_for("Server is ready", timeout=60)
        url = f"nats://127.0.0.1:{server.ports['client']}"
        publish(url, "make-run", [b"kept"])  # streaming answers: a PubAck

        async def jetstream() -> dict[str, Any]:
            nc = await nats.connect(url)
            try:
                info = json.loads((await nc.request("$JS.API.INFO", b"", timeout=5)).data)
                await nc.jetstream().add_stream(name="MAKERUN", subjects=["makerun"],
                                                storage="file")
                return info
            finally:
                await nc.close()

        info = asyncio.run(jetstream())
        assert "error" not in info and info["type"] == "io.nats.jetstream.api.v1.account_info_response"
        assert (tmp_path / "data" / "channels").is_dir()
        assert (tmp_path / "data" / "jetstream").is_dir()
        assert any((tmp_path / "data" / "jetstream").rglob("MAKERUN"))
    finally:
        server.stop()
