"""The layouts of a configuration file are judged as the reference judges them: every layout
of tests/config_layouts.py checked with `nats-server -t -c FILE` and `tidings server -t -c
FILE` (the same verdict, and for a refused one the same words on the same line), and any
text at all read or refused by tidings.config as the reference's parser reads or refuses it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.config_layouts import ACCEPTED, REFUSED
from tests.harness import nats_server_binary
from tidings.config import ConfigError, parse

pytestmark = pytest.mark.timeout(300)

# What the reference's parser (not its options) refuses a text with.
_PARSE_ERROR = re.compile(
    r"Parse error on line (\d+): '(.*)'$|config is invalid \((.*):(\d+):(\d+)\)$|"
    r"is out of the range|expected (integer|float|boolean|Zulu)|variable reference|"
    r"error parsing include", re.S)


def check(command: list[str], conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, "-t", "-c", str(conf)], capture_output=True, text=True,
                          timeout=60)


def tidings_check(conf: Path) -> subprocess.CompletedProcess[str]:
    return check([sys.executable, "-m", "tidings", "server"], conf)


@pytest.mark.parametrize("text", [t for _, t, _ in ACCEPTED], ids=[i for i, _, _ in ACCEPTED])
def test_layouts_both_accept(tmp_path: Path, text: str) -> None:
    conf = tmp_path / "layout.conf"
    conf.write_text(text)
    ref = check([nats_server_binary()], conf)
    assert ref.returncode == 0, ref.stderr
    ours = tidings_check(conf)
    assert ours.returncode == 0, ours.stderr
    assert "is valid" in ours.stdout


@pytest.mark.parametrize(("text", "error"), [(t, e) for _, t, e in REFUSED],
                         ids=[i for i, _, _ in REFUSED])
def test_layouts_both_refuse_in_the_same_words(tmp_path: Path, text: str, error: str) -> None:
    conf = tmp_path / "layout.conf"
    conf.write_text(text)
    ref = check([nats_server_binary()], conf)
    assert ref.returncode != 0
    ours = tidings_check(conf)
    assert ours.returncode == 1 and "Traceback" not in ours.stderr
    assert ours.stderr.strip() == f"tidings server: error: {conf}:{error}"
    m = _PARSE_ERROR.search(ref.stderr.strip())
    assert m is not None, ref.stderr
    line, col, message = error.split(":", 2)
    if m.group(1):  # "Parse error on line N: 'words'": the line and the words
        assert (m.group(1), m.group(2)) == (line, message.strip())
    else:  # "config is invalid (FILE:LINE:COL)"
        assert (m.group(4), m.group(5)) == (line, col)


def _reference_parses(text: str) -> tuple[bool, str]:
    """Whether the reference's parser takes `text` (its options may still refuse it)."""
    fd, name = tempfile.mkstemp(suffix=".conf")
    try:
        os.write(fd, text.encode())
        os.close(fd)
        out = check([nats_server_binary()], Path(name))
    finally:
        os.unlink(name)
    return out.returncode == 0 or _PARSE_ERROR.search(out.stderr.strip()) is None, out.stderr


_PIECES = ["port", "a", ":", "=", " ", "\n", "{", "}", "[", "]", ",", ";", "# c", "// c",
           "/", "1", "1k", "2mb", "1.5", "1.2.3.4:5", "-2", "'s'", '"d"', '"\\t"', "\\x41", "(\n",
           "\n)\n", "true", "$a", "\t", "'", '"', "2020-01-02T03:04:05Z", "2020-"]


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=16).map("".join))
def test_any_text_is_read_or_refused_as_the_reference_does(text: str) -> None:
    try:
        parse(text)
        ours, why = True, ""
    except ConfigError as exc:
        ours, why = False, str(exc)
    reference, said = _reference_parses(text)
    if reference and not ours and 'has no value' in why:
        return  # `{ a }`: the reference files the map under "a" and loses its own key
    assert ours == reference, (why, said)
