"""The reference's JetStream API request structs, as server/godecode.py checks a body against
them: each field's Go type, by JSON name (StreamConfigRequest, CreateConsumerRequest, ...)."""

from __future__ import annotations

import json
from typing import Any

from ..server.godecode import (
    BOOL,
    DURATION,
    I32,
    I64,
    INT,
    METADATA,
    STRING,
    STRINGS,
    TIME,
    U64,
    Compression,
    Enum,
    List,
    Map,
    Struct,
)


def _policy(*names: str) -> Enum:
    return Enum(tuple(json.dumps(n) for n in names))


SUBJECT_TRANSFORM = Struct("server.SubjectTransformConfig", {"src": STRING, "dest": STRING})
STREAM_SOURCE = Struct("server.StreamSource", {
    "name": STRING, "opt_start_seq": U64, "opt_start_time": TIME, "filter_subject": STRING,
    "subject_transforms": List(SUBJECT_TRANSFORM),
    "external": Struct("server.ExternalStream", {"api": STRING, "deliver": STRING}),
    "consumer": Struct("server.StreamConsumerSource",
                       {"name": STRING, "deliver_subject": STRING}),
})
STREAM_CONFIG_FIELDS: dict[str, Any] = {
    "name": STRING, "description": STRING, "subjects": STRINGS,
    "retention": _policy("limits", "interest", "workqueue"),
    "max_consumers": INT, "max_msgs": I64, "max_bytes": I64, "max_age": DURATION,
    "max_msgs_per_subject": I64, "max_msg_size": I32,
    "discard": _policy("old", "new"), "storage": _policy("file", "memory"),
    "num_replicas": INT, "no_ack": BOOL, "duplicate_window": DURATION,
    "placement": Struct("server.Placement",
                        {"cluster": STRING, "tags": STRINGS, "preferred": STRING}),
    "mirror": STREAM_SOURCE, "sources": List(STREAM_SOURCE), "compression": Compression(),
    "first_seq": U64, "subject_transform": SUBJECT_TRANSFORM,
    "republish": Struct("server.RePublish", {"src": STRING, "dest": STRING,
                                             "headers_only": BOOL}),
    "allow_direct": BOOL, "mirror_direct": BOOL, "discard_new_per_subject": BOOL,
    "sealed": BOOL, "deny_delete": BOOL, "deny_purge": BOOL, "allow_rollup_hdrs": BOOL,
    "consumer_limits": Struct("server.StreamConsumerLimits",
                              {"inactive_threshold": DURATION, "max_ack_pending": INT}),
    "allow_msg_ttl": BOOL, "subject_delete_marker_ttl": DURATION, "allow_msg_counter": BOOL,
    "allow_atomic": BOOL, "allow_msg_schedules": BOOL,
    "persist_mode": Enum(('"default"', '""', '"async"')), "allow_batched": BOOL,
    "metadata": METADATA,
}
STREAM_CONFIG_REQUEST = Struct("server.StreamConfigRequest",
                               {**STREAM_CONFIG_FIELDS, "pedantic": BOOL})

CONSUMER_CONFIG = Struct("server.ConsumerConfig", {
    "durable_name": STRING, "name": STRING, "description": STRING,
    "deliver_policy": Enum(('"all"', '"undefined"', '"last"', '"last_per_subject"', '"new"',
                            '"by_start_sequence"', '"by_start_time"')),
    "opt_start_seq": U64, "opt_start_time": TIME,
    "ack_policy": _policy("none", "all", "explicit", "flow_control"),
    "ack_wait": DURATION, "max_deliver": INT, "backoff": List(DURATION),
    "filter_subject": STRING, "filter_subjects": STRINGS,
    "replay_policy": _policy("instant", "original"), "rate_limit_bps": U64,
    "sample_freq": STRING, "max_waiting": INT, "max_ack_pending": INT, "flow_control": BOOL,
    "headers_only": BOOL, "max_batch": INT, "max_expires": DURATION, "max_bytes": INT,
    "deliver_subject": STRING, "deliver_group": STRING, "idle_heartbeat": DURATION,
    "inactive_threshold": DURATION, "num_replicas": INT, "mem_storage": BOOL, "direct": BOOL,
    "sourcing": BOOL, "metadata": METADATA, "pause_until": TIME, "priority_groups": STRINGS,
    "priority_policy": Enum(('"overflow"', '"pinned_client"', '"prioritized"', '"none"', '""'),
                            "unknown priority policy: {text}"),
    "priority_timeout": DURATION,
})
CREATE_CONSUMER_REQUEST = Struct("server.CreateConsumerRequest", {
    "stream_name": STRING, "config": CONSUMER_CONFIG,
    "action": Enum(('"create"', '"update"', '""'), "unknown consumer action: {text}"),
    "pedantic": BOOL,
})

STREAM_STATE = Struct("server.StreamState", {
    "messages": U64, "bytes": U64, "first_seq": U64, "first_ts": TIME, "last_seq": U64,
    "last_ts": TIME, "num_subjects": INT, "subjects": Map(U64), "num_deleted": INT,
    "deleted": List(U64), "lost": Struct("server.LostStreamData",
                                         {"msgs": List(U64), "bytes": U64}),
    "consumer_count": INT,
})


# -- the API's requests, by operation (api.py's names) ---------------------------------------------

_PAGED = {"offset": INT}
REQUESTS: dict[str, Struct] = {
    "STREAM.CREATE": STREAM_CONFIG_REQUEST,
    "STREAM.UPDATE": STREAM_CONFIG_REQUEST,
    "STREAM.NAMES": Struct("server.JSApiStreamNamesRequest", {**_PAGED, "subject": STRING}),
    "STREAM.LIST": Struct("server.JSApiStreamListRequest", {**_PAGED, "subject": STRING}),
    "STREAM.INFO": Struct("server.JSApiStreamInfoRequest", {
        **_PAGED, "deleted_details": BOOL, "subjects_filter": STRING}),
    "STREAM.PURGE": Struct("server.JSApiStreamPurgeRequest",
                           {"seq": U64, "filter": STRING, "keep": U64}),
    "STREAM.MSG.DELETE": Struct("server.JSApiMsgDeleteRequest", {"seq": U64, "no_erase": BOOL}),
    "STREAM.MSG.GET": Struct("server.JSApiMsgGetRequest", {
        "seq": U64, "last_by_subj": STRING, "next_by_subj": STRING, "batch": INT,
        "max_bytes": INT, "start_time": TIME, "multi_last": STRINGS, "up_to_seq": U64,
        "up_to_time": TIME, "no_hdr": BOOL}),
    "STREAM.SNAPSHOT": Struct("server.JSApiStreamSnapshotRequest", {
        "deliver_subject": STRING, "no_consumers": BOOL, "chunk_size": INT,
        "window_size": INT, "jsck": BOOL}),
    "STREAM.RESTORE": Struct("server.JSApiStreamRestoreRequest", {
        "config": Struct("server.StreamConfig", STREAM_CONFIG_FIELDS), "state": STREAM_STATE}),
    "CONSUMER.CREATE": CREATE_CONSUMER_REQUEST,
    "CONSUMER.DURABLE": CREATE_CONSUMER_REQUEST,
    "CONSUMER.NAMES": Struct("server.JSApiConsumersRequest", dict(_PAGED)),
    "CONSUMER.LIST": Struct("server.JSApiConsumersRequest", dict(_PAGED)),
    "CONSUMER.PAUSE": Struct("server.JSApiConsumerPauseRequest", {"pause_until": TIME}),
    "CONSUMER.UNPIN": Struct("server.JSApiConsumerUnpinRequest", {"group": STRING}),
}
