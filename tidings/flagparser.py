"""The command line's mistakes, each one `error:` line: argparse with the README's exit codes.

A bad value (`-p abc`, `--store paper`) exits 1, as every other error a user's input causes;
an unknown flag or a missing one exits 2 (argparse's usage error), with the closest flag the
command has (`did you mean --max_payload?`). Neither prints the pages of usage argparse would:
`--help` does that.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Any, NoReturn

BAD_VALUE = 1  # as the other errors a user's input causes (a port in use, a bad path)
USAGE = 2  # an unknown or missing flag, as argparse and Go's flag package exit
_NUMBER = re.compile(r"^-\d+(\.\d*)?$")  # a value, not a flag


class UsageError(ValueError):
    """A command given without what it needs (exit 2), raised by a command's function."""


class _BadValue(argparse.ArgumentError):
    """A value its flag refuses (a type conversion or a choice)."""


class FlagParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line."""

    usage_on_error = False  # print the usage line first (a short one: `tidings`'s commands)
    _argv: list[str] = []  # what parse_known_args was given

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("exit_on_error", False)  # errors come to parse_known_args below
        super().__init__(*args, **kwargs)  # its sub-commands' parsers are of this class too

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as exc:
            raise _BadValue(action, exc.message) from None

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            if isinstance(action, argparse._SubParsersAction):
                self._unknown_command(str(value), action)
            raise _BadValue(action, exc.message) from None

    def _unknown_command(self, value: str, action: argparse._SubParsersAction) -> NoReturn:
        # `--mistyped x`: x was taken for a command because --mistyped is no flag.
        flags = [w for w in self._argv if w.startswith("-") and not _NUMBER.match(w)
                 and w.partition("=")[0] not in self._option_string_actions]
        if flags:
            self.unknown(flags)
        self.fail(f"unknown command {value!r}{_closest(value, action.choices)}", USAGE)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._argv = list(sys.argv[1:] if args is None else args)
        try:
            return super().parse_known_args(args, namespace)
        except _BadValue as exc:
            self.fail(str(exc), BAD_VALUE)
        except argparse.ArgumentError as exc:
            self.fail(str(exc), USAGE)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen_parser(self, parsed).unknown(extras)
        return parsed

    def unknown(self, extras: list[str]) -> NoReturn:
        """Words no flag took: name the first unknown flag and the closest known one."""
        flags = [word.partition("=")[0] for word in extras if word.startswith("-")]
        if not flags:
            self.fail(f"unexpected argument {extras[0]!r}", USAGE)
        hint = _closest(flags[0], [o for o in self._option_string_actions if len(o) > 2])
        self.fail(f"unknown flag {flags[0]}"
                  f"{hint or f' ({self.prog} --help lists the flags)'}", USAGE)

    def error(self, message: str) -> NoReturn:
        self.fail(message, USAGE)

    def fail(self, message: str, code: int) -> NoReturn:
        """One line, `prog: error: message` (after the usage line if `usage_on_error`: the
        commands of `tidings`), and exit with `code`."""
        if self.usage_on_error:
            self.print_usage(sys.stderr)
        self.exit(code, f"{self.prog}: error: {message}\n")


def _closest(word: str, candidates: Any) -> str:
    """`: did you mean X?` for the candidate nearest `word`, or nothing."""
    names = list(candidates)
    match = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    if not match and word.startswith("-") and not word.startswith("--"):
        match = difflib.get_close_matches("-" + word, names, n=1, cutoff=0.6)  # Go style
    return f": did you mean {match[0]}?" if match else ""


def chosen_parser(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> FlagParser:
    """The sub-command's parser that `parsed` went through (the deepest one)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(parsed, action.dest, None)
            if name in action.choices:
                return chosen_parser(action.choices[name], parsed)
    return parser  # type: ignore[return-value]


def report(prog: str, text: str, exc: BaseException) -> int:
    """`prog: error: text` (what `exc` says) on stderr; the exit code for `exc`."""
    print(f"{prog}: error: {text}", file=sys.stderr)
    return USAGE if isinstance(exc, UsageError) else BAD_VALUE
