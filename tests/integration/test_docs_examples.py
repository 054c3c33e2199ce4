"""Every example in README.md and docs/*.md runs as written, quickly.

The fenced code blocks are extracted and each is run in a temporary directory of its own
(so that it makes nothing in the repository, nor anywhere else, which is checked), within
`TIMEOUT` seconds (`SPARK_TIMEOUT` for Spark's), and must exit with 0:

- ```python: as a script, `nats://127.0.0.1:4222` (or localhost) pointing at a `tidings
  server` started with its defaults (streaming on) and JetStream (`-js`) on a free port;
- ```sh: each line is a `tidings ...` command, run in order; one that runs until stopped
  (`tidings server`, `tidings streaming`, `tidings pipeline`) is waited for until it says it
  is ready, and at the end of the block gets the SIGINT of a Ctrl-C, after which it must exit
  with 0 and without a traceback. A block that starts servers gets free ports for the ones it
  names (the same port for the same number), and a server without `-p` a free one; other
  blocks have their 4222 pointed at the test server;
- ```conf: a configuration file for `tidings server -c FILE`, run as above (its `port`,
  `listen` and `*_port` values on free ports).

A marker in an HTML comment (invisible to readers) on the line before the fence changes that:

- `<!-- example: skip REASON -->`: not run (a fragment, an output sample, a command that
  needs what the test cannot give); the reason is required;
- `<!-- example: file NAME -->`: the block is the file NAME, written into the directory of
  every later example of the same page;
- `<!-- example: pytest NAME -->`: the block is the test module NAME, run by pytest.

Any other block (another language, or none) without a marker fails: a new example is run by
default, or explicitly marked.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tidings.testing.process import ports_in

ROOT = Path(__file__).resolve().parents[2]
# serial: an example must make no file outside its directory, and the checkout's directories
# are watched for new ones, which tests beside it would make (make test runs it alone).
pytestmark = pytest.mark.serial
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
TIMEOUT = 20.0
SPARK_TIMEOUT = 90.0
PYTHON, SHELL, CONF = {"python", "py"}, {"sh", "shell", "bash", "console"}, {"conf"}
MARKER = re.compile(r"^\s*<!--\s*example:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)\s*$")
KINDS = ("skip", "file", "pytest")
# What a run may not create: in the repository, and where a production config points.
WATCHED = (ROOT, ROOT / "docs", ROOT / "tests", Path("/var/lib"))


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the opening fence
    lang: str
    text: str
    marker: str  # what follows "example:", "" without a marker

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        return self.marker.split(maxsplit=1)[0] if self.marker else ""

    @property
    def arg(self) -> str:
        parts = self.marker.split(maxsplit=1)
        return parts[1] if len(parts) > 1 else ""


def extract(doc: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, with the marker before each."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        end = i + 1
        while end < len(lines) and not re.fullmatch(
                rf"\s*{re.escape(fence[0])}{{{len(fence)},}}\s*", lines[end]):
            end += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip()
                for line in lines[i + 1:end]]
        before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        marker = MARKER.match(before)
        blocks.append(Block(doc, i + 1, lang.lower(), "\n".join(body) + "\n",
                            marker.group(1) if marker else ""))
        i = end + 1
    return blocks


BLOCKS = [b for doc in DOCS for b in extract(doc)]


# -- processes ---------------------------------------------------------------------------


class Proc:
    """A command of an example in a process group of its own (as a terminal runs it), its
    stdout and stderr read together by a thread; `ready` says when the output shows that
    the command serves."""

    def __init__(self, cmd: list[str], cwd: Path, ready: Callable[[str], bool] | None = None
                 ) -> None:
        self.cmd, self.ready = cmd, ready
        self.lines: list[str] = []
        self.is_ready = threading.Event()
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=example_env(), text=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.ready is not None and self.ready(self.output):
                self.is_ready.set()
        self.is_ready.set()  # ended: whoever waits looks at the exit code

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def report(self, what: str) -> str:
        return f"{shlex.join(self.cmd)}: {what}\n{self.output[-6000:]}"

    def wait_ready(self, deadline: float) -> None:
        self.is_ready.wait(max(0.0, deadline - time.monotonic()))
        if self.proc.poll() is not None:
            pytest.fail(self.report(f"exited with {self.proc.returncode} instead of serving"))
        if not self.is_ready.is_set():
            pytest.fail(self.report("not ready in time"))

    def finish(self, deadline: float) -> int:
        """The exit code; fails (and kills the group) when it is not over by `deadline`."""
        try:
            code = self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(self.report("still running at the example's time limit"))
        self.reader.join(5)
        return code

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the whole process group."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def example_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # What docs/spark.md asks of a machine without a network, and of its Python workers.
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return env


def server_ready(args: list[str]) -> Callable[[str], bool]:
    streaming = "--no_streaming" not in args

    def ready(out: str) -> bool:
        return "Server is ready" in out and (not streaming or "Streaming server ready" in out
                                             or "runs without streaming" in out)
    return ready


def ready_check(args: list[str]) -> Callable[[str], bool] | None:
    """For a `tidings` command (its arguments) that runs until stopped: when it serves."""
    words = set(args)
    if args[:1] == ["server"] and not words & {"-t", "--signal", "-v", "--version", "-h",
                                               "--help"}:
        return server_ready(args)
    if args[:1] == ["streaming"] and "import-ref" not in words:
        return lambda out: "Streaming server ready" in out
    if args[:1] == ["pipeline"] and not (words & {"--demo", "--duration", "-h", "--help"} or
                                         "availableNow" in words):
        return lambda out: re.search(r"^pipeline: ", out, re.MULTILINE) is not None
    return None


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`tidings server` with its defaults (streaming on, memory store) and JetStream
    (`-js`, for docs/jetstream.md's examples), on a port of its own (read from its log);
    its `host:port`."""
    store = tmp_path_factory.mktemp("js")
    args = ["server", "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", str(store)]
    proc = Proc([sys.executable, "-m", "tidings", *args], tmp_path_factory.mktemp("server"),
                server_ready(args))
    try:
        proc.wait_ready(time.monotonic() + TIMEOUT)
        yield f"127.0.0.1:{ports_in(proc.output)['client']}"
    finally:
        proc.interrupt()
        if proc.finish(time.monotonic() + TIMEOUT) != 0:
            pytest.fail(proc.report("the test server did not stop cleanly"))


@pytest.fixture
def nothing_made_elsewhere() -> Iterator[None]:
    before = {d: set(os.listdir(d)) for d in WATCHED if d.is_dir()}
    yield
    made = {str(d / n) for d, names in before.items() for n in set(os.listdir(d)) - names}
    assert not made, f"the example made {sorted(made)} outside its directory"


# -- the examples ------------------------------------------------------------------------


def is_spark(block: Block) -> bool:
    return any(word in block.text for word in ("pyspark", "tidings.spark", "tidings pipeline"))


def spark_missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "Java is not installed"
    return None


def local_url(text: str, server: str) -> str:
    return re.sub(r"\b(?:127\.0\.0\.1|localhost):4222\b", server, text)


def run_script(cmd: list[str], cwd: Path, deadline: float) -> None:
    proc = Proc(cmd, cwd)
    code = proc.finish(deadline)
    if code != 0:
        pytest.fail(proc.report(f"exited with {code}"))


def run_python(block: Block, server: str, cwd: Path, deadline: float) -> None:
    (cwd / "example.py").write_text(local_url(block.text, server))
    run_script([sys.executable, "example.py"], cwd, deadline)


def run_pytest(block: Block, cwd: Path, deadline: float) -> None:
    (cwd / block.arg).write_text(block.text)
    run_script([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", block.arg],
               cwd, deadline)


# The flags of a port a server listens on, and the listener its log names it by.
PORT_FLAGS = {"-p": "client", "--port": "client", "-m": "http", "--http_port": "http",
              "-ms": "https", "--https_port": "https"}
CLUSTER_FLAGS = {"--cluster", "--cluster_listen"}
NUMBER_IN_URL = r"(?<=:)(\d{2,5})\b"


class Ports:
    """The ports a block names. Where a server command listens on one (-p N, -m N, a
    --cluster URL) it listens on any free port instead (-1; 0 in a URL), read from its log
    once it serves; where a later command names N (a route, a --nats URL) it gets the port
    the first got. (No port is chosen before a start.)"""

    def __init__(self) -> None:
        self.listens: dict[int, dict[str, str]] = {}  # command -> number -> listener
        self.actual: dict[str, str] = {}  # number -> the port it stands for

    def listening(self, index: int, args: list[str]) -> list[str]:
        """A server command's arguments: its own ports any free one, noted."""
        mine, out = self.listens.setdefault(index, {}), []
        for i, arg in enumerate(args):
            flag = args[i - 1] if i else ""
            if flag in PORT_FLAGS and arg.isdigit():
                mine[arg] = PORT_FLAGS[flag]
                out.append("-1")
            elif flag in CLUSTER_FLAGS and (m := re.search(NUMBER_IN_URL, arg)):
                mine[m.group(1)] = "route"
                out.append(arg[:m.start()] + "0" + arg[m.end():])
            else:
                out.append(arg)
        return out

    def resolve(self, args: list[str]) -> list[str]:
        """The ports a command names, as the servers before it got them."""
        return [re.sub(NUMBER_IN_URL, lambda m: self.actual.get(m.group(1), m.group(1)), arg)
                for arg in args]

    def learn(self, index: int, output: str) -> None:
        """What command `index` listens on, from its log."""
        got = ports_in(output)
        for number, listener in self.listens.get(index, {}).items():
            if listener in got:
                self.actual[number] = str(got[listener])

    @staticmethod
    def conf(text: str) -> str:
        """A configuration file's own ports: any free one (-1)."""
        return re.sub(r"(\b(?:\w+_)?(?:port|listen)\s*[:=]?\s*\"?(?:[\w.]*:)?)(\d{2,5})\b",
                      lambda m: m.group(1) + "-1", text)


def commands(block: Block) -> list[list[str]]:
    """The commands of a shell block (comments dropped, `\\` continuations joined)."""
    text = re.sub(r"\\\n", " ", block.text)
    out = [shlex.split(line, comments=True) for line in text.splitlines()]
    out = [c for c in out if c]
    for cmd in out:
        if cmd[0] != "tidings":
            pytest.fail(f"{block.name}: cannot run `{shlex.join(cmd)}`: only `tidings` "
                        "commands are run; mark the block <!-- example: skip REASON -->")
    return out


def prepared(cmds: list[list[str]], server: str) -> tuple[list[list[str]], Ports]:
    """The commands as the test runs them: on the test server, or on ports of their own
    (resolved as they run)."""
    ports, out = Ports(), []
    if not any(c[1:2] == ["server"] for c in cmds):
        return [[local_url(a, server) for a in c[1:]] for c in cmds], ports
    for index, cmd in enumerate(cmds):
        args = cmd[1:]
        if args[:1] == ["server"]:
            args = ports.listening(index, args)
            if not {"-p", "--port"} & set(args):
                args += ["-p", "-1"]
            if not {"-a", "--addr", "--net"} & set(args):
                args += ["-a", "127.0.0.1"]
        out.append(args)
    return out, ports


def run_commands(cmds: list[list[str]], cwd: Path, deadline: float,
                 ports: Ports | None = None) -> None:
    """Each in order; those that serve stay up until the end, then get a Ctrl-C."""
    serving: list[Proc] = []
    ports = ports or Ports()
    try:
        for index, args in enumerate(cmds):
            args = ports.resolve(args)
            check = ready_check(args)
            proc = Proc([sys.executable, "-m", "tidings", *args], cwd, check)
            if check is None:
                code = proc.finish(deadline)
                if code != 0:
                    pytest.fail(proc.report(f"exited with {code}"))
                continue
            serving.append(proc)
            proc.wait_ready(deadline)
            ports.learn(index, proc.output)
        for proc in reversed(serving):
            proc.interrupt()
            code = proc.finish(deadline)
            if code != 0 or "Traceback" in proc.output:
                pytest.fail(proc.report(f"did not stop cleanly on Ctrl-C (exit {code})"))
    finally:
        for proc in serving:
            proc.kill()


def run_shell(block: Block, server: str, cwd: Path, deadline: float) -> None:
    cmds, ports = prepared(commands(block), server)
    run_commands(cmds, cwd, deadline, ports)


def run_conf(block: Block, cwd: Path, deadline: float) -> None:
    (cwd / "example.conf").write_text(Ports.conf(block.text))
    run_commands([["server", "-c", "example.conf", "-a", "127.0.0.1", "-p", "-1"]],
                 cwd, deadline)


def write_files(block: Block, cwd: Path) -> None:
    """The `file` blocks of the same page above this one."""
    for other in BLOCKS:
        if other.doc == block.doc and other.line < block.line and other.kind == "file":
            (cwd / other.arg).write_text(other.text)


RUNNABLE = [b for b in BLOCKS if b.kind != "file"]


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_example_runs_as_written(block: Block, server: str, tmp_path: Path,
                                 nothing_made_elsewhere: None) -> None:
    if block.kind == "skip":
        pytest.skip(f"marked: {block.arg}")
    if is_spark(block) and (reason := spark_missing()):
        pytest.skip(reason)
    deadline = time.monotonic() + (SPARK_TIMEOUT if is_spark(block) else TIMEOUT)
    write_files(block, tmp_path)
    if block.kind == "pytest":
        run_pytest(block, tmp_path, deadline)
    elif block.lang in PYTHON:
        run_python(block, server, tmp_path, deadline)
    elif block.lang in SHELL:
        run_shell(block, server, tmp_path, deadline)
    elif block.lang in CONF:
        run_conf(block, tmp_path, deadline)
    else:
        pytest.fail(f"{block.name}: a ```{block.lang or '(no language)'} block, which the "
                    "test cannot run: give it a language it runs (python, sh, conf) or mark "
                    "it <!-- example: skip REASON -->")


def test_markers_are_known_and_give_their_argument() -> None:
    bad = [f"{b.name}: <!-- example: {b.marker} -->" for b in BLOCKS
           if b.marker and (b.kind not in KINDS or not b.arg)]
    assert not bad, f"markers are `skip REASON`, `file NAME`, `pytest NAME`: {bad}"
    for doc in DOCS:  # a marker not right before a fence marks nothing
        lines = doc.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if MARKER.match(line):
                after = next((x for x in lines[i + 1:] if x.strip()), "")
                assert FENCE.match(after), f"{doc.name}:{i + 1}: a marker without its block"


def test_the_extractor_sees_every_fence() -> None:
    for doc in DOCS:
        fences = sum(1 for line in doc.read_text(encoding="utf-8").splitlines()
                     if re.fullmatch(r"\s*(`{3,}|~{3,})\s*[\w+-]*\s*", line))
        assert fences == 2 * sum(1 for b in BLOCKS if b.doc == doc), doc.name
