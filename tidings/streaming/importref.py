"""Import a data directory of the reference nats-streaming-server file store.

Reads (never writes) the reference layout: every file starts with a u32 version (1); records
are ``u32 size (typed files: type << 24 | size), u32 crc32(payload), payload`` with protobuf
payloads, all little-endian::

    server.dat          one ServerInfo record
    clients.dat         typed: 1 = ClientInfo, 2 = ClientDelete
    .rootdir.lck        fcntl-locked while a reference server runs
    <channel>/msgs.N.dat  MsgProto records (slices N = 1, 2, ...)
    <channel>/subs.dat  typed: 1 = SubState, 2 = SubState update, 3 = SubStateDelete,
                        4 = ack (SubStateUpdate), 5 = message sent (SubStateUpdate)

Channels, messages (sequence and timestamp kept), clients and subscriptions with their
positions (last sent, pending acks) are written into any tidings :class:`Store`. The
``msgs.N.idx`` files are not needed: the data files are the truth. A torn tail (a write cut
short by a crash) ends a file, as the reference itself would truncate it. Encrypted
reference stores are not supported.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from zlib import crc32

from google.protobuf.message import DecodeError

from .pb import filestore_pb2 as spb
from .pb import protocol_pb2 as pb
from .stores.base import ClientRecord, MsgRecord, Store, StoreError, SubRecord

FILE_VERSION = 1
HEADER = struct.Struct("<II")
VERSION = struct.Struct("<I")
CLIENT_ADD, CLIENT_DEL = 1, 2
SUB_NEW, SUB_UPDATE, SUB_DEL, SUB_ACK, SUB_MSG = 1, 2, 3, 4, 5


class ReferenceStoreError(StoreError):
    """The directory is not a readable reference file store."""


@dataclass
class ImportReport:
    cluster_id: str = ""
    channels: int = 0
    messages: int = 0
    subscriptions: int = 0
    clients: int = 0
    warnings: list[str] = field(default_factory=list)


def read_records(path: Path, typed: bool, warnings: list[str]) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each valid record; a bad or torn tail ends the file with a warning."""
    data = path.read_bytes()
    if len(data) < VERSION.size:
        return
    (version,) = VERSION.unpack_from(data)
    if version == 0 or version > FILE_VERSION:
        raise ReferenceStoreError(f"{path}: unsupported file version {version}")
    pos = VERSION.size
    while pos < len(data):
        if pos + HEADER.size > len(data):
            warnings.append(f"{path}: torn record header at offset {pos} ignored")
            return
        word, crc = HEADER.unpack_from(data, pos)
        if word == 0 and crc == 0:
            return  # zero-filled tail, as the reference treats it
        rtype, size = (word >> 24, word & 0xFFFFFF) if typed else (0, word)
        end = pos + HEADER.size + size
        if end > len(data):
            warnings.append(f"{path}: torn record at offset {pos} ignored")
            return
        payload = data[pos + HEADER.size : end]
        if crc32(payload) != crc:
            warnings.append(f"{path}: record at offset {pos} fails its CRC; rest of file ignored")
            return
        yield rtype, payload
        pos = end


def _check_not_running(root: Path) -> None:
    lock = root / ".rootdir.lck"
    if not lock.exists():
        return
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        raise ReferenceStoreError(
            f"{root} is locked by a running nats-streaming-server; stop it first"
        ) from exc
    finally:
        os.close(fd)  # closing the descriptor releases our lock


def parse(msg_type: type, payload: bytes, path: Path):  # noqa: ANN202
    try:
        return msg_type.FromString(payload)
    except DecodeError as exc:
        raise ReferenceStoreError(
            f"{path}: cannot decode a {msg_type.__name__} record (encrypted store?)"
        ) from exc


def check_source(src: str | os.PathLike[str]) -> Path:
    """The reference data directory, if it can be imported now: a directory holding
    server.dat that no running nats-streaming-server has locked."""
    root = Path(src)
    if not root.is_dir():
        raise ReferenceStoreError(f"{root}: not a directory")
    if not (root / "server.dat").is_file():
        raise ReferenceStoreError(f"{root}: no server.dat, not a nats-streaming file store")
    _check_not_running(root)
    return root


def _read_server(root: Path, report: ImportReport) -> spb.ServerInfo:
    path = root / "server.dat"
    for _, payload in read_records(path, False, report.warnings):
        return parse(spb.ServerInfo, payload, path)
    raise ReferenceStoreError(f"{path}: no server record")


def _read_clients(root: Path, report: ImportReport) -> dict[str, spb.ClientInfo]:
    path = root / "clients.dat"
    clients: dict[str, spb.ClientInfo] = {}
    if not path.exists():
        return clients
    for rtype, payload in read_records(path, True, report.warnings):
        if rtype == CLIENT_ADD:
            info = parse(spb.ClientInfo, payload, path)
            clients[info.ID] = info
        elif rtype == CLIENT_DEL:
            clients.pop(parse(spb.ClientDelete, payload, path).ID, None)
        else:
            raise ReferenceStoreError(f"{path}: unknown client record type {rtype}")
    return clients


def slices(chan_dir: Path) -> list[Path]:
    found = []
    for p in chan_dir.iterdir():
        name = p.name
        if name.startswith("msgs.") and name.endswith(".dat") and name[5:-4].isdigit():
            found.append((int(name[5:-4]), p))
    return [p for _, p in sorted(found)]


def read_msgs(chan_dir: Path, name: str, after: int, report: ImportReport) -> Iterator[MsgRecord]:
    """The channel's messages with sequence > ``after``, gaps filled with empty messages."""
    last = 0
    for path in slices(chan_dir):
        for _, payload in read_records(path, False, report.warnings):
            m = parse(pb.MsgProto, payload, path)
            if m.sequence <= last:
                continue
            if last and m.sequence > last + 1:
                report.warnings.append(
                    f"{name}: messages {last + 1}..{m.sequence - 1} missing, stored empty"
                )
                for seq in range(last + 1, m.sequence):
                    if seq > after:
                        yield MsgRecord(seq, m.timestamp, name, "", b"")
            last = m.sequence
            if m.sequence > after:
                yield MsgRecord(m.sequence, m.timestamp, name, m.reply, m.data)


def read_subs(path: Path, report: ImportReport) -> dict[int, tuple[spb.SubState, set[int]]]:
    subs: dict[int, tuple[spb.SubState, set[int]]] = {}
    if not path.exists():
        return subs
    for rtype, payload in read_records(path, True, report.warnings):
        if rtype in (SUB_NEW, SUB_UPDATE):
            state = parse(spb.SubState, payload, path)
            old = subs.get(state.ID)
            subs[state.ID] = (state, old[1] if old else set())
        elif rtype == SUB_DEL:
            subs.pop(parse(spb.SubStateDelete, payload, path).ID, None)
        elif rtype in (SUB_ACK, SUB_MSG):
            upd = parse(spb.SubStateUpdate, payload, path)
            entry = subs.get(upd.ID)
            if entry is None:
                continue
            state, pending = entry
            if rtype == SUB_MSG:
                pending.add(upd.seqno)
                state.lastSent = max(state.lastSent, upd.seqno)
            else:
                pending.discard(upd.seqno)
        else:
            raise ReferenceStoreError(f"{path}: unknown subscription record type {rtype}")
    return subs


def import_reference(
    src: str | os.PathLike[str],
    store: Store,
    *,
    durable_only: bool = True,
    include_clients: bool = True,
) -> ImportReport:
    """Copy a reference file store's state into ``store`` and sync it.

    Only durable subscriptions are imported unless ``durable_only`` is False. Messages the
    store already has (same channel, sequence <= its last) are skipped, so an interrupted
    import can be run again.
    """
    root = check_source(src)
    report = ImportReport()
    server = _read_server(root, report)
    report.cluster_id = server.ClusterID
    info = store.server_info()
    if info.get("cluster_id", server.ClusterID) != server.ClusterID:
        report.warnings.append(
            f"cluster id {server.ClusterID!r} differs from the store's {info['cluster_id']!r}"
        )
    else:
        info["cluster_id"] = server.ClusterID
        if server.NodeID:
            info["node_id"] = server.NodeID
        store.set_server_info(info)

    if include_clients:
        for c in _read_clients(root, report).values():
            store.add_client(
                ClientRecord(
                    c.ID, c.HbInbox, bytes(c.ConnID), c.Protocol, c.PingInterval, c.PingMaxOut
                )
            )
            report.clients += 1

    for chan_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        name = chan_dir.name
        if name.startswith("."):
            continue
        store.create_channel(name)
        report.channels += 1
        after = store.first_last(name)[1]
        report.messages += store.restore_msgs(name, read_msgs(chan_dir, name, after, report))
        existing = {(s.client_id, s.durable_name, s.queue_group) for s in store.subs(name)}
        for state, pending in read_subs(chan_dir / "subs.dat", report).values():
            if durable_only and not state.isDurable:
                continue
            key = (state.clientID, state.durableName, state.qGroup)
            if state.isDurable and key in existing:
                continue
            store.create_sub(
                name,
                SubRecord(
                    client_id=state.clientID,
                    inbox=state.inbox,
                    ack_inbox=state.ackInbox,
                    queue_group=state.qGroup,
                    durable_name=state.durableName,
                    max_in_flight=state.maxInFlight,
                    ack_wait=state.ackWaitInSecs,
                    is_durable=state.isDurable,
                    is_closed=state.isClosed,
                    last_sent=state.lastSent,
                    pending=set(pending),
                ),
            )
            report.subscriptions += 1
        store.sync()
    store.sync()
    return report
