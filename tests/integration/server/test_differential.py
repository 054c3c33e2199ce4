"""Differential tests: the same raw protocol exchange sent to tidings and to the reference
nats-server must get the same answer.

Every exchange runs on a fresh connection to each server: its bytes are written (as several
writes when the exchange is split in pieces), then a PING barrier; the reply is read until the
barrier's PONG comes back or, when the server closes the connection, to EOF. Replies are
compared byte for byte after INFO lines are normalised (ids, ports, versions vary; key sets and
the values that matter are compared). Whether the connection was closed must match too.

Differences that are not bugs are listed in ALLOWED with the reason; an entry that stops
differing fails the test so that the list stays honest. The session summary prints the count.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest

from tests.harness.rawnats import Outcome, RawConn, run_exchange

from .conftest import DIFF_RESULTS, ServerPair

# INFO keys only the reference sends, and why we do not.
REFERENCE_ONLY_INFO_KEYS = {
    "git_commit": "the Go server's build commit; tidings has no such build metadata",
    "api_lvl": "JetStream API level, in INFO from 2.12 on; tidings says 2.11.0 and sends it "
               "only with JetStream on (these exchanges run without)",
    "xkey": "the server's curve key for encrypted auth callouts, which tidings does not offer",
}
# INFO values that must be equal on both servers (all other values are per-server ids,
# ports, versions and are only compared by type).
COMPARED_INFO_VALUES = {
    "proto", "headers", "max_payload", "auth_required", "tls_required", "tls_available",
    "connect_info", "remote_account", "host", "client_ip", "ldm", "jetstream", "nonce",
}

# Exchange name -> why tidings answers differently, accepted.
_SIZE_AS_SENT = (
    "the reference copies the size field of PUB/HPUB into MSG/HMSG as the client wrote it "
    "(005); tidings writes the length in canonical form (5). Both denote the same length, "
    "every client parses it as an integer, no client sends leading zeros, and keeping the "
    "field would cost work on the PUB fast path"
)
_NO_GATEWAYS = (
    "the reference reserves subjects under _GR_. (gateway reply mapping) and $NRG. "
    "(JetStream clustering) and answers 'Permissions Violation'; tidings has neither gateways "
    "nor clustered JetStream, so those prefixes are ordinary subjects (a reply under _GR_. is "
    "refused as on the reference)"
)
ALLOWED: dict[str, str] = {
    "pub_size_leading_zeros": _SIZE_AS_SENT,
    "pub_size_leading_zeros_reply": _SIZE_AS_SENT,
    "hpub_size_leading_zeros": _SIZE_AS_SENT,
    "pub_reserved_gateway_subject": _NO_GATEWAYS,
    "pub_reserved_raft_subject": _NO_GATEWAYS,
}


@dataclass
class Ex:
    name: str
    pieces: list[bytes]
    config: str = "default"
    pongs: int | None = None  # PONGs the exchange itself causes, when not countable
    pause: float = 0.01  # between pieces; keep exchanges well under the 2s to the first PING
    # Compare the lines of the reply as a multiset: the reference delivers a message to the
    # subscriptions of one subject in a random order (they sit in a Go map).
    unordered: bool = False


# Common CONNECT lines. Protocol 0 unless stated: with protocol 1 the first PONG is
# followed by an INFO, so the barrier PONG would not be last.
QUIET = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
VERBOSE = b'CONNECT {"verbose":true,"pedantic":false,"headers":true}\r\n'
PEDANTIC = b'CONNECT {"verbose":false,"pedantic":true,"headers":true}\r\n'
NOHDR = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
NORESP = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
AUTH_OK = b'CONNECT {"verbose":false,"user":"alice","pass":"s3cret"}\r\n'
HDR = b"NATS/1.0\r\nBar: Baz\r\n\r\n"  # 22 bytes


def split_at(data: bytes, *positions: int) -> list[bytes]:
    """data cut at the given offsets (negative offsets count from the end)."""
    cuts = sorted(p if p >= 0 else len(data) + p for p in positions)
    out, prev = [], 0
    for c in cuts:
        out.append(data[prev:c])
        prev = c
    out.append(data[prev:])
    return [p for p in out if p]


def ex(name: str, *pieces: bytes, **kw: Any) -> Ex:
    return Ex(name, list(pieces), **kw)


_SUB_PUB = QUIET + b"SUB foo 1\r\nPUB foo reply.x 5\r\nhello\r\n"
_HPUB = QUIET + b"SUB foo 1\r\nHPUB foo 22 33\r\n" + HDR + b"Hello NATS!\r\n"

EXCHANGES: list[Ex] = [
    # -- connection set-up ----------------------------------------------------------
    ex("ping_before_connect", b"PING\r\n"),
    ex("pong_before_connect", b"PONG\r\n"),
    ex("sub_pub_before_connect", b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n"),
    ex("connect_empty_object_is_verbose", b"CONNECT {}\r\n"),
    ex("connect_verbose", b'CONNECT {"verbose":true}\r\n'),
    ex("connect_quiet", QUIET),
    ex("connect_proto1_first_ping_gets_info",
       b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n'),
    ex("connect_proto1_info_only_once",
       b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\nPING\r\n'),
    ex("connect_proto0_no_async_info", b'CONNECT {"verbose":false,"protocol":0}\r\nPING\r\n'),
    ex("connect_proto2", b'CONNECT {"verbose":false,"protocol":2}\r\n'),
    ex("connect_proto_negative", b'CONNECT {"verbose":false,"protocol":-1}\r\n'),
    ex("connect_proto_string", b'CONNECT {"verbose":false,"protocol":"1"}\r\n'),
    ex("connect_proto_float", b'CONNECT {"verbose":false,"protocol":1.0}\r\n'),
    ex("connect_proto_huge", b'CONNECT {"verbose":false,"protocol":99999999999999999999}\r\n'),
    ex("connect_bad_json", b"CONNECT {bad json\r\n"),
    ex("connect_no_arg", b"CONNECT\r\n"),
    ex("connect_space_no_arg", b"CONNECT \r\n"),
    ex("connect_array", b"CONNECT []\r\n"),
    ex("connect_null", b"CONNECT null\r\n"),
    ex("connect_string", b'CONNECT "x"\r\n'),
    ex("connect_number", b"CONNECT 1\r\n"),
    ex("connect_verbose_string", b'CONNECT {"verbose":"yes"}\r\n'),
    ex("connect_verbose_int", b'CONNECT {"verbose":1}\r\n'),
    ex("connect_verbose_null", b'CONNECT {"verbose":null}\r\n'),
    ex("connect_name_int", b'CONNECT {"verbose":true,"name":5}\r\n'),
    ex("connect_unknown_field", b'CONNECT {"verbose":true,"bogus":[1,2]}\r\n'),
    ex("connect_trailing_garbage", b'CONNECT {"verbose":true} xyz\r\n'),
    ex("connect_trailing_blanks", b'CONNECT   {"verbose":true}  \t\r\n'),
    ex("connect_twice", b'CONNECT {"verbose":true}\r\nCONNECT {"verbose":false}\r\nPING\r\n'),
    ex("connect_again_drops_subscriptions",
       QUIET + b"SUB foo 1\r\nSUB bar q 2\r\n" + QUIET + b"PUB foo 1\r\nx\r\nPUB bar 1\r\ny\r\n"),
    ex("connect_again_then_resubscribe",
       QUIET + b"SUB foo 1\r\n" + QUIET + b"SUB foo 1\r\nPUB foo 1\r\nx\r\n"),
    ex("connect_again_drops_auto_unsubscribe",
       QUIET + b"SUB foo 1\r\nUNSUB 1 5\r\n" + QUIET + b"PUB foo 1\r\nx\r\n"),
    ex("connect_lowercase", b'connect {"verbose":true}\r\n'),
    ex("connect_mixed_case", b'CoNnEcT {"verbose":true}\r\n'),
    ex("connect_tab", b'CONNECT\t{"verbose":true}\r\n'),
    ex("connect_no_blank", b'CONNECT{"verbose":true}\r\n'),
    ex("connect_bare_lf", b'CONNECT {"verbose":true}\n'),
    ex("connect_no_responders_without_headers",
       b'CONNECT {"verbose":false,"no_responders":true}\r\n'),
    ex("connect_tls_required_ignored", b'CONNECT {"verbose":true,"tls_required":true}\r\n'),
    ex("connect_duplicate_keys", b'CONNECT {"verbose":true,"verbose":false}\r\nPING\r\n'),
    ex("connect_unicode_name", b'CONNECT {"verbose":true,"name":"caf\\u00e9 \xe2\x98\x83"}\r\n'),
    ex("connect_pedantic_null", b'CONNECT {"verbose":false,"pedantic":null}\r\nSUB foo..x 1\r\n'),
    ex("connect_echo_string", b'CONNECT {"verbose":true,"echo":"no"}\r\n'),
    ex("connect_headers_int", b'CONNECT {"verbose":true,"headers":1}\r\n'),
    ex("connect_key_case_insensitive",
       b'CONNECT {"Verbose":false,"PEDANTIC":false}\r\nSUB a..b 1\r\n'),
    ex("connect_key_case_last_wins", b'CONNECT {"verbose":false,"VERBOSE":true}\r\n'),
    ex("connect_key_case_wrong_type", b'CONNECT {"Verbose":"yes"}\r\n'),
    ex("connect_nan_in_unknown_field", b'CONNECT {"verbose":true,"bogus":NaN}\r\n'),
    ex("connect_invalid_utf8_name", b'CONNECT {"verbose":true,"name":"\xff\xfe"}\r\n'),
    ex("connect_account_field", b'CONNECT {"verbose":true,"account":"A"}\r\n'),
    ex("connect_new_account_field", b'CONNECT {"verbose":true,"new_account":true}\r\n'),
    ex("connect_account_empty", b'CONNECT {"verbose":true,"account":""}\r\n'),
    ex("connect_account_wrong_type", b'CONNECT {"verbose":true,"account":5}\r\n'),
    ex("connect_protocol_exponent", b'CONNECT {"verbose":true,"protocol":1e0}\r\n'),
    ex("connect_protocol_minus_zero", b'CONNECT {"verbose":true,"protocol":-0}\r\n'),
    ex("connect_nested_unknown", b'CONNECT {"verbose":true,"x":{"y":[1,{"z":null}]}}\r\n'),
    # -- PING / PONG ----------------------------------------------------------------
    ex("ping_lowercase", QUIET + b"ping\r\n"),
    ex("ping_mixed_case", QUIET + b"PiNg\r\n"),
    ex("ping_with_junk", QUIET + b"PINGX foo\r\n"),
    ex("ping_bare_lf", QUIET + b"PING\n"),
    ex("ping_cr_without_lf", QUIET + b"PING\rPING\r\n", pongs=1),
    ex("pong_with_junk", QUIET + b"PONG whatever\r\n"),
    ex("pong_lowercase_verbose", VERBOSE + b"pong\r\n"),
    ex("ping_verbose_no_ok", VERBOSE + b"PING\r\n"),
    ex("many_pings_one_write", QUIET + b"PING\r\n" * 5),
    # -- SUB / PUB / UNSUB ----------------------------------------------------------
    ex("sub_pub", _SUB_PUB),
    ex("pub_without_reply", QUIET + b"SUB foo 1\r\nPUB foo 5\r\nhello\r\n"),
    ex("pub_no_subscribers", QUIET + b"PUB nobody 5\r\nhello\r\n"),
    ex("pub_empty_payload", QUIET + b"SUB foo 1\r\nPUB foo 0\r\n\r\n"),
    ex("pub_payload_contains_crlf", QUIET + b"SUB foo 1\r\nPUB foo 8\r\nab\r\nPING\r\n",
       pongs=0),
    ex("pub_binary_payload", QUIET + b"SUB foo 1\r\nPUB foo 4\r\n\x00\xff\r\x01\r\n"),
    ex("sub_queue", QUIET + b"SUB foo grp 1\r\nPUB foo 2\r\nhi\r\n"),
    ex("sub_star", QUIET + b"SUB foo.* 1\r\nPUB foo.bar 1\r\na\r\nPUB foo.bar.baz 1\r\nb\r\n"),
    ex("sub_gt", QUIET + b"SUB foo.> 1\r\nPUB foo 1\r\na\r\nPUB foo.bar.baz 1\r\nb\r\n"),
    ex("sub_gt_alone", QUIET + b"SUB > 1\r\nPUB a.b.c 1\r\na\r\n"),
    ex("sub_star_and_literal_both_match",
       QUIET + b"SUB foo.* 1\r\nSUB foo.bar 2\r\nSUB foo.> 3\r\nPUB foo.bar 1\r\nx\r\n"),
    ex("sub_order_six_patterns", QUIET + b"SUB foo.* 1\r\nSUB foo.bar 2\r\nSUB foo.> 3\r\n"
       b"SUB > 4\r\nSUB *.bar 5\r\nSUB *.> 6\r\nPUB foo.bar 1\r\nx\r\n"),
    ex("sub_star_inside_token_is_literal",
       QUIET + b"SUB foo*.bar 1\r\nPUB foo*.bar 1\r\nx\r\nPUB fooX.bar 1\r\ny\r\n"),
    ex("sub_duplicate_sid",
       QUIET + b"SUB foo 1\r\nSUB bar 1\r\nPUB foo 1\r\na\r\nPUB bar 1\r\nb\r\n"),
    ex("sub_missing_sid", QUIET + b"SUB foo\r\n"),
    ex("sub_no_args", QUIET + b"SUB\r\n"),
    ex("sub_space_no_args", QUIET + b"SUB \r\n"),
    ex("sub_too_many_args", QUIET + b"SUB a b c d\r\n"),
    ex("sub_tabs_and_runs", QUIET + b"SUB \t foo \t\t grp   1 \r\nPUB foo 1\r\nx\r\n"),
    ex("sub_lowercase", QUIET + b"sub foo 1\r\npub foo 1\r\nx\r\n"),
    ex("sub_bare_lf", QUIET + b"SUB foo 1\nPUB foo 1\nx\r\n"),
    ex("sub_invalid_double_dot", QUIET + b"SUB foo..bar 1\r\n"),
    ex("sub_invalid_trailing_dot", QUIET + b"SUB foo. 1\r\n"),
    ex("sub_invalid_leading_dot", QUIET + b"SUB .foo 1\r\n"),
    ex("sub_invalid_gt_not_last", QUIET + b"SUB foo.>.bar 1\r\n"),
    ex("sub_invalid_verbose_no_ok", VERBOSE + b"SUB foo..bar 1\r\n"),
    ex("sub_invalid_then_valid_same_sid", QUIET + b"SUB a..b 1\r\nSUB a 1\r\nPUB a 1\r\nx\r\n"),
    ex("sub_invalid_pedantic", PEDANTIC + b"SUB foo..bar 1\r\n"),
    ex("sub_same_subject_twice", QUIET + b"SUB foo 1\r\nSUB foo 2\r\nPUB foo 1\r\nx\r\n",
       unordered=True),
    ex("sub_queue_name_with_wildcards", QUIET + b"SUB foo q.* 1\r\nPUB foo 1\r\nx\r\n"),
    ex("sub_queue_name_with_wildcards_pedantic", PEDANTIC + b"SUB foo q.> 1\r\n"),
    ex("sub_non_utf8_subject", QUIET + b"SUB foo\xff 1\r\nPUB foo\xff 1\r\nx\r\n"),
    ex("sub_utf8_subject",
       QUIET + "SUB caf\u00e9.\u2603 1\r\nPUB caf\u00e9.\u2603 1\r\nx\r\n".encode()),
    ex("sub_deep_subject", QUIET + b"SUB " + b".".join([b"t"] * 40) + b" 1\r\nPUB "
       + b".".join([b"t"] * 40) + b" 1\r\nx\r\n"),
    ex("sub_star_star", QUIET + b"SUB *.* 1\r\nPUB a.b 1\r\nx\r\nPUB a 1\r\ny\r\n"),
    ex("sub_unsub_resub", QUIET + b"SUB foo 1\r\nUNSUB 1\r\nSUB bar 1\r\nPUB bar 1\r\nx\r\n"),
    ex("sub_cr_inside_arg", QUIET + b"SUB foo\r1\r\nPUB foo 1\r\nx\r\n"),
    ex("unsub", QUIET + b"SUB foo 1\r\nUNSUB 1\r\nPUB foo 1\r\nx\r\n"),
    ex("unsub_unknown_sid", QUIET + b"UNSUB 99\r\n"),
    ex("unsub_unknown_sid_verbose", VERBOSE + b"UNSUB 99\r\n"),
    ex("unsub_max", QUIET + b"SUB foo 1\r\nUNSUB 1 2\r\n" + b"PUB foo 1\r\nx\r\n" * 3),
    ex("unsub_max_already_reached",
       QUIET + b"SUB foo 1\r\n" + b"PUB foo 1\r\nx\r\n" * 2 + b"UNSUB 1 2\r\nPUB foo 1\r\ny\r\n"),
    ex("unsub_max_above_delivered",
       QUIET + b"SUB foo 1\r\nPUB foo 1\r\nx\r\nUNSUB 1 2\r\n" + b"PUB foo 1\r\ny\r\n" * 2),
    ex("unsub_max_zero", QUIET + b"SUB foo 1\r\nUNSUB 1 0\r\nPUB foo 1\r\nx\r\n"),
    ex("unsub_max_not_a_number", QUIET + b"SUB foo 1\r\nUNSUB 1 abc\r\nPUB foo 1\r\nx\r\n"),
    ex("unsub_max_negative", QUIET + b"SUB foo 1\r\nUNSUB 1 -3\r\nPUB foo 1\r\nx\r\n"),
    ex("unsub_too_many_args", QUIET + b"UNSUB 1 2 3\r\n"),
    ex("unsub_no_args", QUIET + b"UNSUB\r\n"),
    ex("unsub_space_no_args", QUIET + b"UNSUB \r\n"),
    ex("unsub_tabs", QUIET + b"SUB foo 1\r\nUNSUB\t1\t\t1\r\nPUB foo 1\r\nx\r\nPUB foo 1\r\ny\r\n"),
    ex("unsub_max_verbose_unknown_sid", VERBOSE + b"UNSUB 7 5\r\n"),
    ex("hpub_no_subscribers", QUIET + b"HPUB nobody 22 22\r\n" + HDR + b"\r\n"),
    ex("unsub_verbose", VERBOSE + b"SUB foo 1\r\nUNSUB 1\r\n"),
    ex("verbose_every_op", VERBOSE + b"SUB foo 1\r\nPUB foo 1\r\nx\r\nHPUB foo 22 22\r\n"
       + HDR + b"\r\nUNSUB 1\r\nPING\r\nPONG\r\n"),
    # -- PUB argument parsing ---------------------------------------------------------
    ex("pub_no_args", QUIET + b"PUB\r\n"),
    ex("pub_space_no_args", QUIET + b"PUB \r\n"),
    ex("pub_missing_size", QUIET + b"PUB foo\r\n"),
    ex("pub_too_many_args", QUIET + b"PUB a b c 1\r\nx\r\n"),
    ex("pub_negative_size", QUIET + b"PUB foo -1\r\n"),
    ex("pub_huge_size", QUIET + b"PUB foo 99999999999\r\n"),
    ex("pub_nine_digit_size_over_max", QUIET + b"PUB foo 999999999\r\n"),
    ex("pub_size_plus_sign", QUIET + b"PUB foo +5\r\nhello\r\n"),
    ex("pub_size_hex", QUIET + b"PUB foo 0x5\r\nhello\r\n"),
    ex("pub_size_leading_zeros", QUIET + b"SUB foo 1\r\nPUB foo 005\r\nhello\r\n"),
    ex("pub_size_leading_zeros_reply", QUIET + b"SUB foo 1\r\nPUB foo r 0002\r\nhi\r\n"),
    ex("pub_payload_too_long", QUIET + b"PUB foo 5\r\nhelloXY\r\n"),
    ex("pub_payload_too_short", QUIET + b"PUB foo 5\r\nhi\r\nPING\r\n"),
    ex("pub_payload_lf_only", QUIET + b"PUB foo 5\r\nhello\nPING\r\n"),
    ex("pub_payload_cr_only", QUIET + b"PUB foo 5\r\nhello\rPING\r\n"),
    ex("pub_bare_lf_control_line", QUIET + b"SUB foo 1\r\nPUB foo 5\nhello\r\n"),
    ex("pub_tabs", QUIET + b"SUB foo 1\r\nPUB\tfoo\t5\r\nhello\r\n"),
    ex("pub_runs_of_blanks", QUIET + b"SUB foo 1\r\nPUB  \t foo  \t r  5 \t \r\nhello\r\n"),
    ex("pub_lowercase", QUIET + b"SUB foo 1\r\npub foo 5\r\nhello\r\n"),
    ex("pub_mixed_case", QUIET + b"SUB foo 1\r\nPuB foo 5\r\nhello\r\n"),
    ex("pub_cr_inside_arg", QUIET + b"PUB foo\r5\r\nhello\r\n"),
    ex("pub_cr_before_size", QUIET + b"SUB foo 1\r\nPUB foo \r5\r\nhello\r\n"),
    ex("pub_no_blank_after_verb", QUIET + b"PUBfoo 5\r\nhello\r\n"),
    ex("pub_lf_after_verb_blank", QUIET + b"PUB \nfoo 1\r\nx\r\n"),
    ex("pub_max_payload_exceeded_control_line_only", QUIET + b"PUB foo 1048577\r\n"),
    ex("pub_exactly_max_payload", QUIET + b"SUB foo 1\r\nPUB foo 64\r\n" + b"x" * 64 + b"\r\n",
       config="small"),
    ex("pub_max_payload_plus_one", QUIET + b"PUB foo 65\r\n", config="small"),
    ex("pub_max_payload_plus_one_verbose", VERBOSE + b"PUB foo 65\r\n", config="small"),
    ex("pub_star_subject", QUIET + b"SUB foo.* 1\r\nSUB foo.bar 2\r\nPUB foo.* 1\r\nx\r\n"),
    ex("pub_gt_subject", QUIET + b"SUB > 1\r\nPUB foo.> 1\r\nx\r\n"),
    ex("pub_double_dot_subject", QUIET + b"SUB > 1\r\nPUB foo..bar 1\r\nx\r\n"),
    ex("pub_trailing_dot_subject", QUIET + b"SUB > 1\r\nPUB foo. 1\r\nx\r\n"),
    ex("pub_default_pedantic_double_dot",
       b'CONNECT {"verbose":false}\r\nSUB > 1\r\nPUB foo..bar 0\r\n\r\n'),
    ex("pedantic_pub_star_many_subs", PEDANTIC + b"SUB foo.* 1\r\nSUB foo.> 2\r\nSUB * 3\r\n"
       b"SUB > 4\r\nPUB foo.* 1\r\nx\r\n"),
    ex("pub_reserved_gateway_subject", QUIET + b"SUB > 1\r\nPUB _GR_.x 1\r\nx\r\n"),
    ex("pub_reserved_raft_subject", QUIET + b"SUB > 1\r\nPUB $NRG.x 1\r\nx\r\n"),
    ex("pub_reserved_gateway_reply", QUIET + b"SUB > 1\r\nPUB foo _GR_.x 1\r\nx\r\n"),
    ex("pub_sys_subject", QUIET + b"SUB $SYS.> 1\r\nPUB $SYS.x 1\r\nx\r\n"),
    ex("pedantic_pub_star", PEDANTIC + b"SUB > 1\r\nPUB foo.* 1\r\nx\r\n"),
    # A payload in a later read than its PUB line: the reference parses the arguments again,
    # so a pedantic client hears of the invalid subject twice.
    ex("pedantic_pub_invalid_split_payload", PEDANTIC + b"PUB foo..bar 2\r\n", b"hi\r\n"),
    ex("pedantic_hpub_invalid_split_payload", PEDANTIC + b"HPUB foo..bar 12 14\r\n",
       b"NATS/1.0\r\n\r\nhi\r\n"),
    ex("pedantic_pub_invalid_split_before_crlf", PEDANTIC + b"PUB foo..bar 2\r\nhi",
       b"\r\n"),
    ex("pedantic_pub_gt", PEDANTIC + b"SUB > 1\r\nPUB foo.> 1\r\nx\r\n"),
    ex("pedantic_pub_double_dot", PEDANTIC + b"SUB > 1\r\nPUB foo..bar 1\r\nx\r\n"),
    ex("pedantic_pub_valid", PEDANTIC + b"SUB > 1\r\nPUB foo.bar 1\r\nx\r\n"),
    ex("pedantic_pub_form_feed_inside_token", PEDANTIC + b"SUB > 1\r\nPUB a\x0cb 1\r\nx\r\n"),
    ex("pedantic_pub_form_feed_token", PEDANTIC + b"SUB > 1\r\nPUB a.\x0c 1\r\nx\r\n"),
    ex("pedantic_pub_gt_not_last", PEDANTIC + b"SUB > 1\r\nPUB >.a 1\r\nx\r\n"),
    ex("sub_form_feed_subject", QUIET + b"SUB a\x0cb 1\r\nPUB a\x0cb 1\r\nx\r\n"),
    ex("sub_vertical_tab_subject", QUIET + b"SUB a.\x0b 1\r\nPUB a.\x0b 1\r\nx\r\n"),
    ex("pedantic_verbose_pub_invalid",
       b'CONNECT {"verbose":true,"pedantic":true}\r\nPUB foo.* 1\r\nx\r\n'),
    ex("pedantic_hpub_invalid", PEDANTIC + b"SUB > 1\r\nHPUB foo.* 22 22\r\n" + HDR + b"\r\n"),
    # -- HPUB -----------------------------------------------------------------------
    ex("hpub", _HPUB),
    ex("hpub_reply", QUIET + b"SUB foo 1\r\nHPUB foo r.1 22 24\r\n" + HDR + b"hi\r\n"),
    ex("hpub_no_payload", QUIET + b"SUB foo 1\r\nHPUB foo 22 22\r\n" + HDR + b"\r\n"),
    ex("hpub_multi_value", QUIET + b"SUB MORNING.MENU 1\r\nHPUB MORNING.MENU 47 51\r\n"
       b"NATS/1.0\r\nBREAKFAST: donut\r\nBREAKFAST: eggs\r\n\r\nYum!\r\n"),
    ex("hpub_status_line_from_client",
       QUIET + b"SUB foo 1\r\nHPUB foo 28 28\r\nNATS/1.0 503 Oops\r\nA: b\r\n\r\n\r\n"),
    ex("hpub_without_headers_connect", NOHDR + b"HPUB foo 22 22\r\n" + HDR + b"\r\n"),
    ex("hpub_before_connect", b"HPUB foo 22 22\r\n" + HDR + b"\r\n"),
    ex("hpub_header_larger_than_total", QUIET + b"HPUB foo 22 5\r\n"),
    ex("hpub_missing_total", QUIET + b"HPUB foo 22\r\n"),
    ex("hpub_too_many_args", QUIET + b"HPUB a b c 22 22\r\n"),
    ex("hpub_zero_header_size", QUIET + b"SUB foo 1\r\nHPUB foo 0 5\r\nhello\r\n"),
    ex("hpub_not_a_header_block", QUIET + b"SUB foo 1\r\nHPUB foo 5 5\r\nhello\r\n"),
    ex("hpub_negative_header_size", QUIET + b"HPUB foo -1 5\r\n"),
    ex("hpub_tabs_lowercase", QUIET + b"SUB foo 1\r\nhpub\tfoo \t22\t22\r\n" + HDR + b"\r\n"),
    ex("hpub_payload_too_long", QUIET + b"HPUB foo 22 22\r\n" + HDR + b"XX\r\n"),
    ex("hpub_over_max_payload", QUIET + b"HPUB foo 22 65\r\n", config="small"),
    ex("hpub_exactly_max_payload",
       QUIET + b"SUB foo 1\r\nHPUB foo 22 64\r\n" + HDR + b"y" * 42 + b"\r\n", config="small"),
    ex("hpub_size_leading_zeros", QUIET + b"SUB foo 1\r\nHPUB foo 022 0024\r\n" + HDR + b"hi\r\n"),
    ex("pub_sub_without_headers", NOHDR + b"SUB foo 1\r\nPUB foo 1\r\nx\r\n"),
    # -- other verbs and garbage ------------------------------------------------------
    ex("unknown_verb", QUIET + b"FOO bar\r\n"),
    ex("unknown_verb_before_connect", b"FOO\r\n"),
    ex("pubx_verb", QUIET + b"PUBX foo 1\r\n"),
    ex("subx_verb", QUIET + b"SUBX foo 1\r\n"),
    ex("unsubscribe_verb", QUIET + b"UNSUBSCRIBE 1\r\n"),
    ex("pu_then_newline", QUIET + b"PU\r\n"),
    ex("empty_line", QUIET + b"\r\n"),
    ex("bare_lf_line", QUIET + b"\n"),
    ex("leading_space", QUIET + b" PING\r\n"),
    ex("leading_tab", QUIET + b"\tPING\r\n"),
    ex("crlf_between_ops", QUIET + b"PING\r\n\r\nPING\r\n", pongs=1),
    ex("msg_from_client", QUIET + b"MSG foo 1 5\r\nhello\r\n"),
    ex("hmsg_from_client", QUIET + b"SUB > 1\r\nHMSG foo 1 22 22\r\n"),
    ex("info_from_client", QUIET + b'INFO {"server_id":"x"}\r\n'),
    ex("info_bad_json_from_client", QUIET + b"INFO {nope\r\n"),
    ex("info_no_blank_from_client", QUIET + b"INFO{}\r\n"),
    ex("ok_from_client", QUIET + b"+OK\r\n"),
    ex("ok_lowercase_from_client", QUIET + b"+ok junk\r\n"),
    ex("err_from_client", QUIET + b"-ERR 'boom'\r\n"),
    ex("err_no_blank_from_client", QUIET + b"-ERR\r\n"),
    ex("route_sub_verb", QUIET + b"RS+ foo\r\n"),
    ex("leaf_sub_verb", QUIET + b"LS+ foo\r\n"),
    ex("account_sub_verb", QUIET + b"A+ foo\r\n"),
    ex("nul_bytes", QUIET + b"\x00\x00\r\n"),
    ex("high_bytes_verb", QUIET + "PÜB foo 1\r\n".encode()),
    ex("http_request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    ex("tls_client_hello", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03"),
    # -- control line limits ------------------------------------------------------------
    ex("control_line_over_default_max", QUIET + b"SUB " + b"a" * 5000 + b" 1\r\n"),
    ex("control_line_over_max_no_newline", QUIET + b"SUB " + b"a" * 5000),
    ex("pub_control_line_over_max", QUIET + b"PUB " + b"a" * 5000 + b" 1\r\nx\r\n"),
    ex("connect_over_max_control_line",
       b'CONNECT {"verbose":false,"name":"' + b"n" * 120 + b'"}\r\n', config="small"),
    ex("control_line_exactly_max", QUIET + b"SUB " + b"s" * 94 + b" 1\r\n", config="small"),
    ex("control_line_exactly_max_split_before_lf",
       QUIET + b"SUB " + b"s" * 94 + b" 1\r", b"\n", config="small"),
    ex("control_line_max_plus_one_split_before_lf",
       QUIET + b"SUB " + b"s" * 95 + b" 1\r", b"\n", config="small"),
    ex("control_line_max_plus_one", QUIET + b"SUB " + b"s" * 95 + b" 1\r\n", config="small"),
    ex("pub_control_line_exactly_max",
       QUIET + b"SUB > 1\r\nPUB " + b"p" * 94 + b" 1\r\nx\r\n", config="small"),
    ex("pub_control_line_max_plus_one", QUIET + b"PUB " + b"p" * 95 + b" 1\r\nx\r\n",
       config="small"),
    ex("ping_with_long_junk", QUIET + b"PING" + b"x" * 300 + b"\r\n", config="small"),
    ex("unknown_long_line", QUIET + b"Z" * 300 + b"\r\n", config="small"),
    ex("ok_with_long_junk", QUIET + b"+OK" + b"x" * 300 + b"\r\n", config="small"),
    # -- frames split in pieces -----------------------------------------------------------
    ex("split_pub_everywhere", *split_at(_SUB_PUB, len(QUIET) + 1, len(QUIET) + 12,
                                         len(QUIET) + 15, -9, -7, -4, -1)),
    ex("split_between_cr_and_lf", *split_at(_SUB_PUB, -1, len(QUIET) + 10)),
    ex("split_inside_verb", *split_at(QUIET + b"PING\r\n", len(QUIET) + 2)),
    ex("split_connect", *split_at(QUIET, 3, 8, 30, -1)),
    ex("split_hpub_headers", *split_at(_HPUB, -30, -20, -15, -3)),
    ex("split_unknown_verb", *split_at(QUIET + b"PUX foo\r\n", len(QUIET) + 2)),
    ex("split_max_payload_control_line",
       *split_at(QUIET + b"PUB foo 1048577\r\n", len(QUIET) + 12, -1)),
    ex("split_payload_then_bad_end", *split_at(QUIET + b"PUB foo 3\r\nabcXY\r\n", -4)),
    ex("split_control_line_over_max", QUIET, b"SUB " + b"a" * 60, b"b" * 60, b" 1\r\n",
       config="small"),
    ex("split_one_byte_pieces", *[bytes([b]) for b in QUIET + b"SUB a 1\r\nPUB a 2\r\nhi\r\n"],
       pause=0.001),
    # -- no responders and echo -----------------------------------------------------------
    ex("no_responders_503", NORESP + b"SUB r.1 1\r\nPUB nobody r.1 2\r\nhi\r\n"),
    ex("no_responders_hpub", NORESP + b"SUB r.1 1\r\nHPUB nobody r.1 22 22\r\n" + HDR + b"\r\n"),
    ex("no_responders_without_reply", NORESP + b"SUB r.1 1\r\nPUB nobody 2\r\nhi\r\n"),
    ex("no_responders_not_requested", QUIET + b"SUB r.1 1\r\nPUB nobody r.1 2\r\nhi\r\n"),
    ex("no_responders_reply_not_subscribed", NORESP + b"PUB nobody r.1 2\r\nhi\r\n"),
    ex("no_responders_has_responder",
       NORESP + b"SUB svc 2\r\nSUB r.1 1\r\nPUB svc r.1 2\r\nhi\r\n"),
    ex("no_responders_wildcard_reply_sub", NORESP + b"SUB r.* 1\r\nPUB nobody r.9 2\r\nhi\r\n"),
    ex("no_responders_invalid_subject", NORESP + b"SUB r.1 1\r\nPUB foo..bar r.1 1\r\nx\r\n"),
    ex("no_responders_verbose",
       b'CONNECT {"verbose":true,"headers":true,"no_responders":true}\r\n'
       b"SUB r.1 1\r\nPUB nobody r.1 0\r\n\r\n"),
    ex("echo_false", b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo 1\r\nPUB foo 1\r\nx\r\n'),
    ex("echo_false_no_responders",
       b'CONNECT {"verbose":false,"echo":false,"headers":true,"no_responders":true}\r\n'
       b"SUB svc 2\r\nSUB r.1 1\r\nPUB svc r.1 2\r\nhi\r\n"),
    ex("echo_false_queue_self_only",
       b'CONNECT {"verbose":false,"echo":false,"headers":true,"no_responders":true}\r\n'
       b"SUB svc g 2\r\nSUB r.1 1\r\nPUB svc r.1 2\r\nhi\r\n"),
    ex("no_responders_queue_only", NORESP + b"SUB svc g 2\r\nSUB r.1 1\r\nPUB svc r.1 2\r\nhi\r\n"),
    ex("verbose_proto1_ping",
       b'CONNECT {"verbose":true,"protocol":1}\r\nSUB a 1\r\nPING\r\nPUB a 1\r\nx\r\n'),
    # -- many frames in one write: the compiled scanner's runs, interest changing between --
    ex("many_pubs_one_write", QUIET + b"SUB foo 1\r\n" + b"".join(
        b"PUB %s %d\r\n%s\r\n" % (b"foo" if i % 3 else b"nobody", i % 50, b"z" * (i % 50))
        for i in range(600))),
    ex("interest_changes_between_runs", QUIET + b"PUB a 1\r\n1\r\n" * 50 + b"SUB a 1\r\n"
       + b"PUB a 1\r\n2\r\n" * 50 + b"UNSUB 1\r\n" + b"PUB a 1\r\n3\r\n" * 50
       + b"SUB a.> 2\r\nSUB a 3\r\n" + b"PUB a 1\r\n4\r\nPUB a.b 1\r\n5\r\n" * 50),
    ex("auto_unsubscribe_inside_a_run", QUIET + b"SUB a 1\r\nUNSUB 1 7\r\n"
       + b"PUB a 1\r\nx\r\n" * 20 + b"PUB b 1\r\ny\r\n"),
    ex("requests_to_nobody_in_a_run", NORESP + b"SUB r 1\r\n" + b"".join(
        b"PUB nobody.%d r 1\r\n%d\r\n" % (i % 4, i % 10) for i in range(40))),
    ex("big_payloads_one_write", b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB big 1\r\n'
       + b"".join(b"PUB big %d\r\n%s\r\n" % (n, bytes([65 + i]) * n)
                  for i, n in enumerate([40000, 1, 70000, 0, 32768, 32767]))),
    # -- authorization --------------------------------------------------------------------
    ex("auth_ping_first", b"PING\r\n", config="auth"),
    ex("auth_sub_first", b"SUB foo 1\r\n", config="auth"),
    ex("auth_garbage_first", b"XYZ\r\n", config="auth"),
    ex("auth_ok", AUTH_OK + b"PING\r\n", config="auth"),
    ex("auth_ok_lowercase_connect", AUTH_OK.replace(b"CONNECT", b"connect"), config="auth"),
    ex("auth_ok_verbose", b'CONNECT {"user":"alice","pass":"s3cret"}\r\n', config="auth"),
    ex("auth_bad_password", b'CONNECT {"user":"alice","pass":"nope"}\r\n', config="auth"),
    ex("auth_no_credentials", b'CONNECT {"verbose":false}\r\n', config="auth"),
    ex("auth_password_wrong_type", b'CONNECT {"user":"alice","pass":5}\r\n', config="auth"),
    ex("auth_bad_json", b"CONNECT {nope\r\n", config="auth"),
    ex("auth_ok_then_ops", AUTH_OK + b"SUB a 1\r\nPUB a 1\r\nx\r\n", config="auth"),
    ex("auth_split_connect", *split_at(AUTH_OK + b"PING\r\n", 1, 4, 20), config="auth"),
    ex("auth_connect_partial_then_bad", b"CON", b"X\r\n", config="auth"),
    ex("token_ok", b'CONNECT {"verbose":false,"auth_token":"t0ken"}\r\nPING\r\n',
       config="token"),
    ex("token_bad", b'CONNECT {"verbose":false,"auth_token":"nope"}\r\n', config="token"),
    ex("token_as_user", b'CONNECT {"verbose":false,"user":"t0ken"}\r\n', config="token"),
]


# A request frame split in two at every byte position (the compiled scanner, the Python
# fast path and the general parser all have to hold partial frames), and a frame whose
# payload is followed by the wrong bytes, split at every position too.
_REQ = b"PUB foo r.1 5\r\nhello\r\n"
_BAD_END = b"PUB foo 2\r\nhiXY\r\n"
EXCHANGES += [
    ex(f"split_request_at_{k}", QUIET + b"SUB foo 1\r\n" + _REQ[:k], _REQ[k:])
    for k in range(1, len(_REQ))
]
EXCHANGES += [
    ex(f"split_bad_payload_end_at_{k}", QUIET + _BAD_END[:k], _BAD_END[k:])
    for k in range(1, len(_BAD_END))
]


# -- normalisation and comparison --------------------------------------------------------
_INFO = re.compile(rb"INFO (\{.*?\}) ?\r\n")


def normalise_info(info: dict[str, Any]) -> str:
    keys = sorted(k for k in info if k not in REFERENCE_ONLY_INFO_KEYS)
    shown = []
    for k in keys:
        v = info[k]
        if k in COMPARED_INFO_VALUES:
            shown.append(f"{k}={json.dumps(v)}")
        else:
            shown.append(f"{k}:{type(v).__name__}")
    return "INFO<" + ",".join(shown) + ">"


def normalise(data: bytes) -> bytes:
    def repl(m: re.Match[bytes]) -> bytes:
        return normalise_info(json.loads(m.group(1))).encode() + b"\r\n"

    return _INFO.sub(repl, data)


def comparable(data: bytes, unordered: bool) -> Any:
    norm = normalise(data)
    return sorted(norm.split(b"\r\n")) if unordered else norm


def describe(o: Outcome) -> str:
    state = "timed out" if o.timed_out else ("closed" if o.closed else "open")
    return f"{state}: {normalise(o.data)!r}"


def _names() -> list[str]:
    return [e.name for e in EXCHANGES]


def test_table_is_well_formed() -> None:
    names = _names()
    assert len(names) == len(set(names)), "exchange names must be unique"
    assert len(names) >= 100
    assert set(ALLOWED) <= set(names), "ALLOWED names an exchange that does not exist"


@pytest.mark.parametrize("exchange", EXCHANGES, ids=_names())
def test_exchange(exchange: Ex, server_pairs: ServerPair) -> None:
    """Compare the reference with tidings, both with its compiled PUB scanner and without."""
    ref = server_pairs.get("reference", exchange.config)
    want = run_exchange(ref.port, exchange.pieces, pongs=exchange.pongs, pause=exchange.pause)
    assert not want.timed_out, f"the reference did not answer: {describe(want)}"
    problems = []
    for kind in ("tidings", "tidings-pure"):
        ours = server_pairs.get(kind, exchange.config)
        got = run_exchange(ours.port, exchange.pieces, pongs=exchange.pongs,
                           pause=exchange.pause)
        same = (
            comparable(got.data, exchange.unordered) == comparable(want.data, exchange.unordered)
            and got.closed == want.closed
            and got.timed_out == want.timed_out
        )
        if not same:
            problems.append(f"\n {kind + ':':13} {describe(got)}")
    if problems:
        problems.append(f"\n {'reference:':13} {describe(want)}")
    if exchange.name in ALLOWED:
        reason = ALLOWED[exchange.name]
        DIFF_RESULTS[exchange.name] = ("allowed" if problems else "agree", reason)
        assert problems, (
            f"{exchange.name} is in ALLOWED but now agrees with the reference; "
            "remove it from the list"
        )
        return
    DIFF_RESULTS[exchange.name] = ("differ" if problems else "agree", "".join(problems))
    assert not problems, "".join(problems)


@pytest.mark.parametrize("config", ["default", "small", "auth", "token"])
def test_initial_info_matches(config: str, server_pairs: ServerPair) -> None:
    """INFO on connect: same keys (but the documented reference-only ones), same values for
    the fields clients act on."""
    infos = []
    for kind in ("tidings", "reference"):
        server = server_pairs.get(kind, config)
        with RawConn(server.port) as conn:
            assert conn.info_line.endswith(b" \r\n")
            infos.append(conn.info)
    ours, ref = infos
    assert set(ours) - set(ref) == set(), "INFO keys only tidings sends"
    assert set(ref) - set(ours) <= set(REFERENCE_ONLY_INFO_KEYS), (
        f"reference INFO keys tidings lacks: {set(ref) - set(ours)}"
    )
    assert normalise_info(ours) == normalise_info(ref)
    assert list(k for k in ours) == [k for k in ref if k in ours], "INFO key order differs"
