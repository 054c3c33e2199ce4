"""The generated protobuf messages match the reference wire definitions field for field."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor as F

from tidings.streaming.pb import filestore_pb2 as spb
from tidings.streaming.pb import protocol_pb2 as pb

S, B, U64, I64, U32, I32, BOOL, ENUM = (
    F.TYPE_STRING,
    F.TYPE_BYTES,
    F.TYPE_UINT64,
    F.TYPE_INT64,
    F.TYPE_UINT32,
    F.TYPE_INT32,
    F.TYPE_BOOL,
    F.TYPE_ENUM,
)

# Transcribed from spec/streaming.md: message -> {field: (number, type)}.
WIRE = {
    pb.PubMsg: {
        "clientID": (1, S),
        "guid": (2, S),
        "subject": (3, S),
        "reply": (4, S),
        "data": (5, B),
        "connID": (6, B),
        "sha256": (10, B),
    },
    pb.PubAck: {"guid": (1, S), "error": (2, S)},
    pb.MsgProto: {
        "sequence": (1, U64),
        "subject": (2, S),
        "reply": (3, S),
        "data": (4, B),
        "timestamp": (5, I64),
        "redelivered": (6, BOOL),
        "redeliveryCount": (7, U32),
        "CRC32": (10, U32),
    },
    pb.Ack: {"subject": (1, S), "sequence": (2, U64)},
    pb.ConnectRequest: {
        "clientID": (1, S),
        "heartbeatInbox": (2, S),
        "protocol": (3, I32),
        "connID": (4, B),
        "pingInterval": (5, I32),
        "pingMaxOut": (6, I32),
    },
    pb.ConnectResponse: {
        "pubPrefix": (1, S),
        "subRequests": (2, S),
        "unsubRequests": (3, S),
        "closeRequests": (4, S),
        "error": (5, S),
        "subCloseRequests": (6, S),
        "pingRequests": (7, S),
        "pingInterval": (8, I32),
        "pingMaxOut": (9, I32),
        "protocol": (10, I32),
        "publicKey": (100, S),
    },
    pb.Ping: {"connID": (1, B)},
    pb.PingResponse: {"error": (1, S)},
    pb.SubscriptionRequest: {
        "clientID": (1, S),
        "subject": (2, S),
        "qGroup": (3, S),
        "inbox": (4, S),
        "maxInFlight": (5, I32),
        "ackWaitInSecs": (6, I32),
        "durableName": (7, S),
        "startPosition": (10, ENUM),
        "startSequence": (11, U64),
        "startTimeDelta": (12, I64),
    },
    pb.SubscriptionResponse: {"ackInbox": (2, S), "error": (3, S)},
    pb.UnsubscribeRequest: {
        "clientID": (1, S),
        "subject": (2, S),
        "inbox": (3, S),
        "durableName": (4, S),
    },
    pb.CloseRequest: {"clientID": (1, S)},
    pb.CloseResponse: {"error": (1, S)},
    spb.SubState: {
        "ID": (1, U64),
        "clientID": (2, S),
        "qGroup": (3, S),
        "inbox": (4, S),
        "ackInbox": (5, S),
        "maxInFlight": (6, I32),
        "ackWaitInSecs": (7, I32),
        "durableName": (8, S),
        "lastSent": (9, U64),
        "isDurable": (10, BOOL),
        "isClosed": (11, BOOL),
    },
    spb.SubStateDelete: {"ID": (1, U64)},
    spb.SubStateUpdate: {"ID": (1, U64), "seqno": (2, U64)},
    spb.ServerInfo: {
        name: (i, S)
        for i, name in enumerate(
            [
                "ClusterID",
                "Discovery",
                "Publish",
                "Subscribe",
                "Unsubscribe",
                "Close",
                "SubClose",
                "AcksSubs",
                "NodeID",
            ],
            start=1,
        )
    },
    spb.ClientInfo: {
        "ID": (1, S),
        "HbInbox": (2, S),
        "ConnID": (3, B),
        "Protocol": (4, I32),
        "PingInterval": (5, I32),
        "PingMaxOut": (6, I32),
    },
    spb.ClientDelete: {"ID": (1, S)},
}


@pytest.mark.parametrize("message", list(WIRE), ids=lambda m: m.DESCRIPTOR.full_name)
def test_fields_match_the_reference(message: type) -> None:
    fields = {f.name: (f.number, f.type) for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]
    assert fields == WIRE[message]


def test_packages_and_start_positions() -> None:
    assert pb.DESCRIPTOR.package == "pb" and spb.DESCRIPTOR.package == "spb"
    assert [(v.name, v.number) for v in pb.StartPosition.DESCRIPTOR.values] == [
        ("NewOnly", 0),
        ("LastReceived", 1),
        ("TimeDeltaStart", 2),
        ("SequenceStart", 3),
        ("First", 4),
    ]


def test_known_encodings() -> None:
    # Hand-encoded: tag = number << 3 | wire type.
    m = pb.MsgProto(sequence=5, subject="a", data=b"x", timestamp=300, redelivered=True, CRC32=7)
    assert m.SerializeToString() == bytes.fromhex("080512016122017828ac0230015007")
    r = pb.ConnectResponse(publicKey="k")
    assert r.SerializeToString() == bytes.fromhex("a206016b")  # field 100, length-delimited
    s = pb.SubscriptionRequest(startPosition=pb.First, startTimeDelta=-1)
    assert s.SerializeToString() == bytes.fromhex("500460" + "ff" * 9 + "01")
