"""A message's frames as routing carries them: the HMSG frame, its header-less form (made
when a delivery first needs it, once), renamed by an import as the frame is, and the parts
the server's own subscriptions take."""

from __future__ import annotations

import pytest

from tidings.server.accounts import frame_message, reframe
from tidings.server.connection import BIG_PAYLOAD, Headerless, msg_frame

HDR = b"NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n"


def wire(frame: tuple[bytes, bytes, bytes | None, int], sid: bytes = b"9") -> bytes:
    head, tail, big, _ = frame
    return head + b" " + sid + b" " + tail + (big + b"\r\n" if big is not None else b"")


@pytest.mark.parametrize("payload", [b"", b"hello", b"x" * 4000, b"y" * (BIG_PAYLOAD + 1)])
@pytest.mark.parametrize("reply", [None, b"r.1"])
def test_the_headerless_form_is_the_msg_of_the_payload_made_once(
        payload: bytes, reply: bytes | None) -> None:
    data = HDR + payload
    plain = Headerless(b"s.t", reply, data, len(HDR))
    frame = plain.frame()
    assert frame == msg_frame(b"MSG ", b"s.t", reply, payload)
    assert plain.frame() is frame
    assert frame_message(msg_frame(b"HMSG ", b"s.t", reply, data, len(HDR)), plain) == (
        HDR, payload)
    assert frame_message(frame, None) == (None, payload)


@pytest.mark.parametrize("hdr_len,size", [(0, 0), (5, 5), (22, 4095), (22, 4096), (4096, 4096),
                                          (4095, 70000)])
def test_an_hmsg_frame_states_its_sizes(hdr_len: int, size: int) -> None:
    data = b"h" * hdr_len + b"p" * (size - hdr_len)
    got = wire(msg_frame(b"HMSG ", b"s", b"r", data, hdr_len))
    assert got == b"HMSG s 9 r %d %d\r\n%b\r\n" % (hdr_len, size, data)


def test_an_import_renames_both_forms_alike() -> None:
    data = HDR + b"hi"
    frame = msg_frame(b"HMSG ", b"a.b", None, data, len(HDR))
    renamed, plain = reframe(frame, Headerless(b"a.b", None, data, len(HDR)), b"a.b", b"x.a.b")
    assert wire(renamed) == b"HMSG x.a.b 9 %d %d\r\n%bhi\r\n" % (len(HDR), len(data), HDR)
    assert plain is not None and wire(plain.frame()) == b"MSG x.a.b 9 2\r\nhi\r\n"
    # A frame that carries another subject than the one it was routed by keeps it.
    kept = Headerless(b"stored", None, data, len(HDR))
    same, still = reframe(msg_frame(b"HMSG ", b"stored", None, data, len(HDR)), kept,
                          b"deliver", b"other")
    assert still is kept and same[0] == b"HMSG stored"
