"""Message tracing (nats-server 2.11): `Nats-Trace-Dest`, `Nats-Trace-Only`, trace events.

The differential test plays the same publishes against tidings and the reference nats-server
and compares, case by case, what subscribers and the publisher received and the trace event
each server sent, after normalising what must differ (ids, times, server names). Whether a
case produced no event is proved without waiting: every case is followed by a traced
publish to a subject nobody listens on, whose event must be the next one to arrive.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
from typing import Any

import nats
import pytest

from tests.harness import Server, start_configured
from tests.harness.rawnats import CONNECT_PLAIN, RawConn

from .conftest import ServerPair

_ids = itertools.count()
GO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")


@pytest.fixture(params=["tidings", "reference"])
def server(request: pytest.FixtureRequest, server_pairs: ServerPair) -> Server:
    return server_pairs.get(request.param, "default")


def hpub(subject: bytes, headers: list[str], payload: bytes = b"hello",
         reply: bytes = b"") -> bytes:
    hdr = ("NATS/1.0\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()
    head = b"HPUB " + subject + (b" " + reply if reply else b"")
    return b"%b %d %d\r\n%b%b\r\n" % (head, len(hdr), len(hdr) + len(payload), hdr, payload)


def read_event(conn: RawConn) -> tuple[bytes, bytes]:
    """The next trace event on `conn`: (its header block, its JSON text)."""
    line = conn.read_line()
    while line == b"PING\r\n":
        line = conn.read_line()
    words = line.split()
    assert words[0] in (b"MSG", b"HMSG"), line
    size = int(words[-1])
    conn.read_until(lambda b: len(b) >= size + 2)
    data = conn.take(size + 2)[:-2]
    hdr_len = int(words[-2]) if words[0] == b"HMSG" else 0
    hdr, body = data[:hdr_len], data[hdr_len:]
    if b"Content-Encoding: gzip" in hdr:
        body = gzip.decompress(body)
    elif b"Content-Encoding: snappy" in hdr:
        body = snappy_unframe(body)
    return hdr, body


def snappy_unframe(data: bytes) -> bytes:
    """Decode a snappy framed stream (checksums not checked): enough to read both servers'
    events without a codec package."""
    assert data.startswith(b"\xff\x06\x00\x00sNaPpY"), data[:16]
    out, i = b"", 10
    while i < len(data):
        kind, size = data[i], int.from_bytes(data[i + 1:i + 4], "little")
        chunk, i = data[i + 8:i + 4 + size], i + 4 + size  # past the 4-byte checksum
        assert kind in (0, 1), kind
        out += chunk if kind == 1 else snappy_block(chunk)
    return out


def snappy_block(src: bytes) -> bytes:
    """Decompress one raw snappy block."""
    i = shift = 0
    while src[i] & 0x80:  # the uncompressed length, a varint we do not need
        i, shift = i + 1, shift + 7
    i += 1
    out = bytearray()
    while i < len(src):
        tag, kind = src[i], src[i] & 3
        i += 1
        if kind == 0:  # literal
            n = tag >> 2
            if n >= 60:
                extra = n - 59
                n = int.from_bytes(src[i:i + extra], "little")
                i += extra
            out += src[i:i + n + 1]
            i += n + 1
            continue
        if kind == 1:
            length, offset = 4 + (tag >> 2 & 7), (tag >> 5) << 8 | src[i]
            i += 1
        else:
            width = 2 if kind == 2 else 4
            length, offset = (tag >> 2) + 1, int.from_bytes(src[i:i + width], "little")
            i += width
        for _ in range(length):  # copies may overlap what they write
            out.append(out[-offset])
    return bytes(out)


def received(conn: RawConn) -> bytes:
    """What arrived on `conn` up to a PING barrier, without the server's own PINGs."""
    return conn.barrier().replace(b"PING\r\n", b"")


class Scene:
    """A tracer, two subscribers (one without header support) and a publisher with echo off
    that also subscribes (so its egress is refused: no echo), on subjects of their own under `prefix`."""

    def __init__(self, server: Server, prefix: bytes, verbose: bool = False) -> None:
        self.prefix = prefix
        self.tracer = RawConn(server.port)
        self.tracer.connect(b'CONNECT {"verbose":false,"headers":true,"name":"tracer"}\r\n')
        self.tracer.send(b"SUB %b.trace 1\r\nSUB %b.trace.other 2\r\n" % (prefix, prefix))
        self.sub = RawConn(server.port)
        self.sub.connect(b'CONNECT {"verbose":false,"headers":true,"name":"sub"}\r\n')
        self.sub.send(b"SUB %b.foo 1\r\nSUB %b.foo 2\r\nUNSUB 2\r\nSUB %b.foo q 3\r\n"
                      % (prefix, prefix, prefix))
        self.old = RawConn(server.port)
        self.old.connect(CONNECT_PLAIN)
        self.old.send(b"SUB %b.foo 4\r\n" % prefix)
        self.pub = RawConn(server.port)
        verb = b"true" if verbose else b"false"
        self.pub.connect(b'CONNECT {"verbose":%b,"headers":true,"no_responders":true,'
                         b'"echo":false,"name":"pub"}\r\n' % verb)
        self.pub.send(b"SUB %b.foo 7\r\n" % prefix)
        for conn in (self.tracer, self.sub, self.old, self.pub):
            assert received(conn) in (b"", b"+OK\r\n")
        self.roles = {conn.info["client_id"]: role for conn, role in (
            (self.tracer, "tracer"), (self.sub, "sub"), (self.old, "old"), (self.pub, "pub"))}
        self.sentinels = 0

    def close(self) -> None:
        for conn in (self.tracer, self.sub, self.old, self.pub):
            conn.close()

    def publish(self, data: bytes) -> dict[str, Any]:
        """Send one publish; return what each connection got and the events it caused."""
        self.sentinels += 1
        sentinel = b"%b.sentinel.%d" % (self.prefix, self.sentinels)
        self.pub.send(data + hpub(sentinel, [f"Nats-Trace-Dest: {self.prefix.decode()}.trace"]))
        outcome: dict[str, Any] = {"pub": received(self.pub), "sub": received(self.sub),
                                   "old": received(self.old), "events": []}
        while True:
            hdr, text = read_event(self.tracer)
            if json.loads(text)["events"][0]["subj"] == sentinel.decode():
                break
            outcome["events"].append((hdr, self.normalise(text)))
        return outcome

    def normalise(self, text: bytes) -> dict[str, Any]:
        """The event with what differs between two servers replaced by what it must be."""
        event = json.loads(text)
        server = dict(event["server"])
        # Feature flags of JetStream's (2.12+); a 2.11 server, and tidings, has none.
        server.pop("feature_flags", None)
        assert re.fullmatch(r"N[A-Z2-7]{55}", server["id"]), server
        assert server["name"] and isinstance(server["ver"], str), server
        assert isinstance(server["seq"], int) and server["seq"] > 0, server
        assert GO_TIME.match(server["time"]) and server["time"].endswith("Z"), server
        server.update(id="ID", name="NAME", ver="VER", seq="SEQ", time="TIME")
        events = []
        for item in event["events"]:
            item = dict(item)
            assert GO_TIME.match(item["ts"]), item
            item["ts"] = "TS"
            item["cid"] = self.roles[item["cid"]]
            events.append(item)
        # The reference's subject index keeps no order among subscriptions on one subject.
        events[1:] = sorted(events[1:], key=lambda e: json.dumps(e, sort_keys=True))
        # Key order is part of the shape: compare it through the JSON text.
        # The request as written, to compare escaping too (Go escapes <, > and &).
        request = re.search(rb',"request":(.*),"events":\[', text)
        assert request, text
        return {"server": server, "request": request[1].decode(),
                "rest": json.dumps({**event, "server": None, "events": events})}


CASES: dict[str, list[str]] = {
    "traced": ["Nats-Trace-Dest: {p}.trace", "A: 1", "A:   2  ", "Empty:", "b-lower: x"],
    "only-true": ["Nats-Trace-Dest: {p}.trace", "Nats-Trace-Only: true"],
    "only-1": ["Nats-Trace-Only: 1", "Nats-Trace-Dest: {p}.trace"],
    "only-ON": ["Nats-Trace-Dest: {p}.trace", "Nats-Trace-Only: ON"],
    "only-yes": ["Nats-Trace-Dest: {p}.trace", "Nats-Trace-Only: yes"],
    "two-dests": ["Nats-Trace-Dest: {p}.trace.other", "Nats-Trace-Dest: {p}.trace",
                  "Nats-Trace-Only: true"],
    "disabled": ["Nats-Trace-Dest: trace disabled", "Nats-Trace-Only: true"],
    "bad-dest": ["Nats-Trace-Dest: {p}..trace"],
    "bad-dest-only": ["Nats-Trace-Dest: {p}..trace", "Nats-Trace-Only: true"],
    "wildcard-dest": ["Nats-Trace-Dest: {p}.*", "Nats-Trace-Only: true"],
    "origin-account": ["Nats-Trace-Dest: {p}.trace", "Nats-Trace-Origin-Account: A", "X: y"],
    "origin-account-only": ["Nats-Trace-Dest: {p}.trace", "Nats-Trace-Origin-Account: A",
                            "Nats-Trace-Only: true"],
    "lower-case-name": ["nats-trace-dest: {p}.trace", "Nats-Trace-Only: true"],
    "traceparent": ["traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                    "Nats-Trace-Only: true"],
    "gzip": ["Nats-Trace-Dest: {p}.trace", "Accept-Encoding: gzip"],
    "snappy": ["Nats-Trace-Dest: {p}.trace", "Accept-Encoding: snappy"],
    "s2": ["Nats-Trace-Dest: {p}.trace", "Accept-Encoding: br, S2"],
    "unknown-encoding": ["Nats-Trace-Dest: {p}.trace", "Accept-Encoding: br"],
    "gateway-reply-dest": ["Nats-Trace-Dest: _GR_.{p}.trace"],
    "raft-dest": ["Nats-Trace-Dest: $NRG.{p}", "Nats-Trace-Only: true"],
    "escaped": ["Nats-Trace-Dest: {p}.trace", "Html: <a&b>", "Utf8: é"],
}


def _play(server: Server, verbose: bool = False) -> dict[str, Any]:
    prefix = b"tr%d" % next(_ids)
    scene = Scene(server, prefix, verbose)
    p = prefix.decode()
    try:
        results = {}
        for name, headers in CASES.items():
            results[name] = scene.publish(hpub(prefix + b".foo", [h.format(p=p) for h in headers]))
        results["nobody"] = scene.publish(hpub(prefix + b".none", [f"Nats-Trace-Dest: {p}.trace"]))
        results["no-responders-only"] = scene.publish(hpub(
            prefix + b".none", [f"Nats-Trace-Dest: {p}.trace", "Nats-Trace-Only: true"],
            reply=prefix + b".foo"))
        results["responders-only"] = scene.publish(hpub(
            prefix + b".foo", [f"Nats-Trace-Dest: {p}.trace", "Nats-Trace-Only: true"],
            reply=prefix + b".none"))
        # Renumber the prefix so that the two servers' outcomes compare equal.
        return json.loads(json.dumps(results, default=repr).replace(p, "P"))
    finally:
        scene.close()


@pytest.mark.parametrize("verbose", [False, True])
def test_trace_events_match_the_reference(server_pairs: ServerPair, verbose: bool) -> None:
    ours = _play(server_pairs.get("tidings", "default"), verbose)
    theirs = _play(server_pairs.get("reference", "default"), verbose)
    for name in theirs:
        assert ours[name] == theirs[name], name


def test_trace_only_is_traced_not_delivered(server: Server) -> None:
    prefix = b"tr%d" % next(_ids)
    scene = Scene(server, prefix)
    try:
        out = scene.publish(hpub(prefix + b".foo", [
            f"Nats-Trace-Dest: {prefix.decode()}.trace", "Nats-Trace-Only: true"]))
        assert out["sub"] == out["old"] == out["pub"] == b""
        [(hdr, event)] = out["events"]
        assert hdr == b""
        rest = json.loads(event["rest"])
        assert rest["request"] == {"header": {
            "Nats-Trace-Dest": [f"{prefix.decode()}.trace"], "Nats-Trace-Only": ["true"]},
            "msgsize": 65 + len(prefix)}
        ingress, *egress = rest["events"]
        assert ingress == {"type": "in", "ts": "TS", "kind": 0, "cid": "pub", "name": "pub",
                           "acc": "$G", "subj": f"{prefix.decode()}.foo"}
        subj = f"{prefix.decode()}.foo"
        assert sorted((e["cid"], e.get("queue", ""), e.get("error", "")) for e in egress) == [
            ("old", "", ""), ("pub", "", "Not delivered because of no echo"),
            ("sub", "", ""), ("sub", "q", "")]
        assert all(e["type"] == "eg" and e["sub"] == subj and e["kind"] == 0 for e in egress)
        # Egress events name the connection when it has a name.
        assert all(("name" in e) == (e["cid"] != "old") for e in egress)
    finally:
        scene.close()


async def test_natspy_trace_only(server: Server) -> None:
    """nats-py sends the headers: the event arrives, subscribers get nothing."""
    subject = f"trpy{next(_ids)}"
    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=5)
    try:
        traces = await nc.subscribe(f"{subject}.trace")
        plain = await nc.subscribe(f"{subject}.foo")
        await nc.publish(f"{subject}.foo", b"x", headers={
            "Nats-Trace-Dest": f"{subject}.trace", "Nats-Trace-Only": "true"})
        await nc.publish(f"{subject}.foo", b"after")
        event = json.loads((await traces.next_msg(timeout=5)).data)
        assert [e["type"] for e in event["events"]] == ["in", "eg"]
        assert event["events"][0]["subj"] == f"{subject}.foo"
        assert (await plain.next_msg(timeout=5)).data == b"after"
    finally:
        await nc.close()


async def test_natspy_traced_request(server: Server) -> None:
    """A traced request is answered and traced; a trace-only request to nobody gets the
    no-responders status (and its event)."""
    subject = f"trpy{next(_ids)}"
    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=5)
    try:
        traces = await nc.subscribe(f"{subject}.trace")

        async def answer(msg: Any) -> None:
            await msg.respond(b"pong")

        await nc.subscribe(f"{subject}.svc", cb=answer)
        hdrs = {"Nats-Trace-Dest": f"{subject}.trace"}
        reply = await nc.request(f"{subject}.svc", b"ping", timeout=5, headers=hdrs)
        assert reply.data == b"pong"
        request, response = [json.loads((await traces.next_msg(timeout=5)).data)["events"]
                             for _ in range(2)]
        assert [(e["type"], e.get("sub")) for e in request] == [
            ("in", None), ("eg", f"{subject}.svc")]
        # nats-py's respond() sends the request's headers back: the response is traced too.
        assert response[0]["subj"].startswith("_INBOX.")
        assert [e["type"] for e in response] == ["in", "eg"]
        only = {**hdrs, "Nats-Trace-Only": "true"}
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request(f"{subject}.nobody", b"ping", timeout=5, headers=only)
        assert len(json.loads((await traces.next_msg(timeout=5)).data)["events"]) == 1
    finally:
        await nc.close()


def test_info_has_no_api_level(server_pairs: ServerPair) -> None:
    """api_lvl (the JetStream API level) came to INFO in 2.12; tidings says 2.11.0."""
    with RawConn(server_pairs.get("tidings", "default").port) as conn:
        assert conn.info["version"] == "2.11.0"
        assert "api_lvl" not in conn.info


def _oversized(server: Server) -> tuple[bytes, dict[str, Any]]:
    """An HPUB over max_payload (64 in the "small" configuration) that asks for tracing."""
    prefix = b"tr%d" % next(_ids)
    with RawConn(server.port) as tracer, RawConn(server.port) as pub:
        tracer.connect(b'CONNECT {"verbose":false,"headers":true}\r\n')
        tracer.send(b"SUB %b.trace 1\r\n" % prefix)
        tracer.barrier()
        pub.connect(b'CONNECT {"verbose":false,"headers":true,"name":"pub"}\r\n')
        hdr = b"NATS/1.0\r\nNats-Trace-Dest: %b.trace\r\n\r\n" % prefix
        pub.send(b"HPUB %b.foo %d 300\r\n%b" % (prefix, len(hdr), hdr))
        closing = pub.read_to_eof()
        event = json.loads(read_event(tracer)[1])
    event.pop("server")
    for item in event["events"]:
        assert GO_TIME.match(item.pop("ts")), item
        assert item.pop("cid") == pub.info["client_id"], item
    return closing, json.loads(json.dumps(event).replace(prefix.decode(), "P"))


def test_oversized_message_traces_its_ingress_error(server_pairs: ServerPair) -> None:
    """The reference reports a message over max_payload in a trace event before closing."""
    ours = _oversized(server_pairs.get("tidings", "small"))
    theirs = _oversized(server_pairs.get("reference", "small"))
    assert ours == theirs
    assert theirs[0] == b"-ERR 'Maximum Payload Violation'\r\n"
    assert theirs[1]["events"] == [{"type": "in", "kind": 0, "name": "pub", "acc": "$G",
                                    "subj": "P.foo", "error": "maximum payload exceeded"}]


MAPPED = """
mappings {
  mp.foo: mp.bar
  "mp.w.*": "mp.x.{{wildcard(1)}}"
  mp.keep: [{destination: mp.keep, weight: 100%}]
}
"""
# A -V line of one connection: what was received (`<<-`) or sent (`->>`), and the operation
# or MSG_PAYLOAD (whose text the two servers quote differently).
_TRACE_LINE = r'cid:{cid} - (?:"[^"]*" - )?((?:<<-|->>) (?:\[[^\]]*\]|MSG_PAYLOAD))'


def _play_mapped(kind: str) -> dict[str, Any]:
    """Traced publishes to mapped subjects (and one unmapped, one trace-only) and a plain
    PUB to a mapped subject, on a server run with -V: the events, what the subscriber got,
    and how the log traces the publisher's messages and the subscriber's deliveries."""
    server = start_configured(kind, MAPPED, extra_args=["-V"])
    try:
        with RawConn(server.port) as tracer, RawConn(server.port) as sub, \
                RawConn(server.port) as pub:
            tracer.connect(b'CONNECT {"verbose":false,"headers":true,"name":"tracer"}\r\n')
            tracer.send(b"SUB trace 1\r\n")
            sub.connect(b'CONNECT {"verbose":false,"headers":true,"name":"sub"}\r\n')
            sub.send(b"SUB mp.> 1\r\n")
            for conn in (tracer, sub):
                assert received(conn) == b""
            pub.connect(b'CONNECT {"verbose":false,"headers":true,"name":"pub"}\r\n')
            roles = {conn.info["client_id"]: role for conn, role in (
                (tracer, "tracer"), (sub, "sub"), (pub, "pub"))}
            events = []
            for subject, extra in ((b"mp.foo", []), (b"mp.w.q", []), (b"mp.keep", []),
                                   (b"mp.none", []), (b"mp.foo", ["Nats-Trace-Only: true"])):
                pub.send(hpub(subject, ["Nats-Trace-Dest: trace", *extra]))
                event = json.loads(read_event(tracer)[1])
                events.append([{**e, "ts": "TS", "cid": roles[e.get("cid", 0)]}
                               if "cid" in e else {**e, "ts": "TS"} for e in event["events"]])
            pub.send(b"PUB mp.foo 2\r\nhi\r\n")
            pub.barrier()
            got = received(sub)
            cids = {role: cid for cid, role in roles.items()}
    finally:
        server.stop()
    log = server.log()
    trace = {role: [line for line in re.findall(_TRACE_LINE.format(cid=cids[role]), log)
                    if not line.endswith(("[PING]", "[PONG]"))] for role in ("pub", "sub")}
    return {"events": events, "sub": got, "trace": trace}


def test_a_mapped_subject_is_traced_as_the_reference_traces_it() -> None:
    """A subject mapping that applies (also one that keeps the subject) is a trace event
    (`sm`, with the subject it sent the message to) after the ingress, which names the
    published subject; -V logs the operation as published, then `MAPPING from -> to`,
    then the payload, and the deliveries of traced messages as of any other."""
    ours, theirs = _play_mapped("tidings"), _play_mapped("reference")
    assert theirs["events"][0][1] == {"type": "sm", "ts": "TS", "to": "mp.bar"}
    assert "<<- [MAPPING mp.foo -> mp.bar]" in theirs["trace"]["pub"]
    assert ours["events"] == theirs["events"]
    assert ours["sub"] == theirs["sub"]
    assert ours["trace"] == theirs["trace"]
