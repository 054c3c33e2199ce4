"""The streaming flags read their units with tidings.config.units, as nats-streaming-server
reads them: --max_bytes with the configuration file's size grammar (its getBytes parses
"bytes: VALUE" with the NATS config parser, so `1k` is 1000 and `1KB` 1024), boolean flags
with Go's words (and the file's yes/no, on/off)."""

from __future__ import annotations

import pytest

from tidings.flagparser import FlagParser
from tidings.streaming.server.flags import add_streaming_arguments


def parse(*argv: str) -> object:
    parser = FlagParser(prog="t")
    add_streaming_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(("text", "want"), [
    ("1k", 1000), ("64k", 64_000), ("1KB", 1024), ("1kib", 1024), ("10MB", 10 << 20),
    ("2m", 2_000_000), ("1t", 10**12), ("1TB", 1 << 40), ("0", 0), ("-1", -1),
])
def test_max_bytes_reads_sizes_as_the_configuration_file(text: str, want: int) -> None:
    assert parse("-mb", text).max_bytes == want  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", ["1.5MB", "1.5", "100b", "1 KB", "x"])
def test_max_bytes_refuses_what_the_file_refuses(text: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--max_bytes", text)
    assert exc.value.code == 1
    assert f"argument -mb/--max_bytes: expected a size, got '{text}'" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "want"), [
    ("true", True), ("T", True), ("1", True), ("yes", True), ("on", True),
    ("false", False), ("F", False), ("0", False), ("no", False), ("off", False),
])
def test_boolean_flags(text: str, want: bool) -> None:
    args = parse("--file_sync", text, "--file_truncate_bad_eof", text)
    assert args.file_sync is want  # type: ignore[attr-defined]
    assert args.file_truncate_bad_eof is want  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", ["y", "n", "maybe"])
def test_boolean_flags_refused(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--file_sync", text)
    assert exc.value.code == 1
    assert f"argument --file_sync: invalid boolean value '{text}'" in capsys.readouterr().err
