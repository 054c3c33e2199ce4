"""Mirrors and sources (sourcing.py) on tidings and on the reference nats-server: the same
streams, publishes and requests; what the copies hold compared (sequences, subjects, headers,
data, times), and the configurations the reference refuses refused in its words."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.harness import Server, start_tidings
from tests.integration.jetstream.copies import api, in_step, messages


async def mirror_run(server: Server, storage: str) -> dict[str, Any]:
    nc = await nats.connect(server.url)
    try:
        await api(nc, "STREAM.CREATE.MO", {"name": "MO", "subjects": ["mo.>"],
                                           "storage": storage})
        for i in range(6):
            await nc.request(f"mo.{i % 2}", b"m%d" % i, headers={"Nats-Msg-Id": f"i{i}"})
        await api(nc, "STREAM.MSG.DELETE.MO", {"seq": 2})
        created = await api(nc, "STREAM.CREATE.MM", {"name": "MM", "storage": storage,
                                                     "mirror": {"name": "MO"}})
        info = await in_step(nc, "MM", 6)
        await nc.request("mo.9", b"later")
        after = await in_step(nc, "MM", 7)
        origin, mirror = await messages(nc, "MO"), await messages(nc, "MM")
        for name in ("MM", "MO"):
            await api(nc, f"STREAM.DELETE.{name}")
        return {"config": created["config"], "created_mirror": created.get("mirror"),
                "state": {k: info["state"][k] for k in ("messages", "first_seq", "last_seq",
                                                        "num_deleted")},
                "mirror_info": sorted(info["mirror"]), "after": after["state"]["messages"],
                "same": origin == mirror, "mirror": mirror}
    finally:
        await nc.close()


@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_a_mirror_keeps_its_origins_sequences_and_times(servers: list[Server],
                                                              storage: str) -> None:
    ours, theirs = [await mirror_run(srv, storage) for srv in servers]
    assert theirs["same"] and ours["same"]  # (sequences, gaps, subjects, headers, times)
    for key in ("state", "mirror_info", "after", "created_mirror"):
        assert ours[key] == theirs[key], key
    for key in ("mirror", "subjects", "duplicate_window"):
        assert (key in ours["config"]) == (key in theirs["config"]), key
    assert [m["seq"] for m in ours["mirror"]] == [1, 3, 4, 5, 6, 7]


def _without_ident(msg: dict[str, Any]) -> tuple[str, str, str]:
    """A sourced message as both servers write it: the last token of Nats-Stream-Source
    (the origin's identity, a hash of each server's own) left out."""
    lines = []
    for line in msg["hdrs"].split("\r\n"):
        if line.startswith("Nats-Stream-Source:"):
            line = line.rsplit(" ", 1)[0]
        lines.append(line)
    return msg["subject"], "\r\n".join(lines), msg.get("data", "")


async def sources_run(server: Server) -> dict[str, Any]:
    nc = await nats.connect(server.url)
    try:
        await api(nc, "STREAM.CREATE.SA", {"name": "SA", "subjects": ["sa.>"],
                                           "storage": "memory"})
        await api(nc, "STREAM.CREATE.SB", {"name": "SB", "subjects": ["sb.>"],
                                           "storage": "memory"})
        for i in range(4):
            await nc.request(f"sa.{i % 2}", b"a%d" % i, headers={"Nats-Expected-Stream": "SA"})
            await nc.request(f"sb.{i}", b"b%d" % i)
        created = await api(nc, "STREAM.CREATE.SS", {
            "name": "SS", "subjects": ["ss.>"], "storage": "memory",
            "sources": [{"name": "SA", "filter_subject": "sa.1"},
                        {"name": "SA", "subject_transforms": [{"src": "sa.0", "dest": "x.0"}]},
                        {"name": "SB", "opt_start_seq": 3}]})
        await in_step(nc, "SS", 6)
        await nc.request("sb.9", b"later")
        await nc.request("ss.own", b"own")
        info = await in_step(nc, "SS", 8)
        got = await messages(nc, "SS")
        for name in ("SS", "SA", "SB"):
            await api(nc, f"STREAM.DELETE.{name}")
        config = {k: v for k, v in created["config"].items() if k != "metadata"}
        return {"config": config,  # (the metadata names each server's version)
                "created_sources": sorted(json.dumps(s, sort_keys=True)
                                          for s in created.get("sources", [])),
                "state": {k: info["state"][k] for k in ("messages", "first_seq", "last_seq")},
                "sources": sorted((s["name"], s.get("seq"), s["lag"]) for s in info["sources"]),
                "messages": sorted(_without_ident(m) for m in got)}
    finally:
        await nc.close()


async def test_sources_copy_what_their_filters_take_with_the_source_header(
        servers: list[Server]) -> None:
    ours, theirs = [await sources_run(srv) for srv in servers]
    assert ours == theirs
    assert ("x.0", "NATS/1.0\r\nNats-Stream-Source: SA 1 sa.0 x.0 sa.0\r\n\r\n", "YTA=") \
        in ours["messages"]  # (Nats-Expected-* of the origin's publish not copied)


async def test_a_mirror_made_before_its_origin_copies_it_once_it_is_there(
        servers: list[Server]) -> None:
    for server in servers:
        nc = await nats.connect(server.url)
        try:
            made = await api(nc, "STREAM.CREATE.EM", {"name": "EM", "storage": "memory",
                                                      "mirror": {"name": "EO"}})
            assert "error" not in made, made
            await api(nc, "STREAM.CREATE.EO", {"name": "EO", "subjects": ["eo"],
                                               "storage": "memory"})
            for i in range(3):
                await nc.request("eo", b"%d" % i)
            info = await in_step(nc, "EM", 3)
            assert info["state"]["messages"] == 3
        finally:
            for name in ("EM", "EO"):
                await api(nc, f"STREAM.DELETE.{name}")
            await nc.close()


REFUSED: list[dict[str, Any]] = [
    {"mirror": {"name": "RO"}, "subjects": ["r.x"]},
    {"mirror": {"name": "RO"}, "sources": [{"name": "RO"}]},
    {"mirror": {"name": "RO"}, "first_seq": 5},
    {"mirror": {"name": "RO", "filter_subject": "ro.a",
                "subject_transforms": [{"src": "ro.b", "dest": "x"}]}},
    {"mirror": {"name": "RO", "subject_transforms": [{"src": "ro.*", "dest": "x.{{wildcard(1)}}"},
                                                     {"src": "ro.a", "dest": "y"}]}},
    {"mirror": {"name": "R.O"}},
    {"mirror": {"name": "RO"}, "max_msg_size": 10},
    {"mirror": {"name": "RO"}, "subject_delete_marker_ttl": 10**9, "allow_msg_ttl": True,
     "allow_rollup_hdrs": True},
    {"sources": [{"name": "R.O"}]},
    {"sources": [{"name": "RO"}, {"name": "RO"}]},
    {"sources": [{"name": "RO", "filter_subject": "ro.a",
                  "subject_transforms": [{"src": "ro.b", "dest": "x"}]}]},
    {"sources": [{"name": "RO", "subject_transforms": [{"src": "ro.>", "dest": "x.>"},
                                                       {"src": "ro.a", "dest": "y"}]}]},
]


async def test_refused_mirrors_and_sources_get_the_references_errors(
        servers: list[Server]) -> None:
    answers = []
    for server in servers:
        nc = await nats.connect(server.url)
        try:
            await api(nc, "STREAM.CREATE.RO", {"name": "RO", "subjects": ["ro.>"],
                                               "storage": "memory", "max_msg_size": 100})
            got = [(await api(nc, "STREAM.CREATE.RT", {"name": "RT", "storage": "memory",
                                                       **case})).get("error")
                   for case in REFUSED]
            await api(nc, "STREAM.DELETE.RO")
            answers.append(got)
        finally:
            await nc.close()
    ours, theirs = answers
    for case, mine, reference in zip(REFUSED, ours, theirs, strict=True):
        assert reference is not None, case
        assert mine == reference, case


async def test_a_file_mirror_and_source_go_on_after_a_restart_without_copying_twice(
        tmp_path: Path) -> None:
    args = ["-js", "-sd", str(tmp_path / "store")]
    server = start_tidings(extra_args=args)
    try:
        nc = await nats.connect(server.url)
        await api(nc, "STREAM.CREATE.FO", {"name": "FO", "subjects": ["fo.>"]})
        await api(nc, "STREAM.CREATE.FM", {"name": "FM", "mirror": {"name": "FO"}})
        await api(nc, "STREAM.CREATE.FS", {"name": "FS", "sources": [{"name": "FO"}]})
        for i in range(5):
            await nc.request(f"fo.{i}", b"%d" % i)
        await in_step(nc, "FM", 5)
        await in_step(nc, "FS", 5)
        await nc.close()
    finally:
        server.stop()
    server = start_tidings(extra_args=args)
    try:
        nc = await nats.connect(server.url)
        for i in range(5, 8):
            await nc.request(f"fo.{i}", b"%d" % i)
        mirror = await in_step(nc, "FM", 8)
        sourced = await in_step(nc, "FS", 8)
        assert (mirror["state"]["messages"], sourced["state"]["messages"]) == (8, 8)
        data = [m["data"] for m in await messages(nc, "FS")]
        assert data == [base64.b64encode(b"%d" % i).decode() for i in range(8)]
        await nc.close()
    finally:
        server.stop()
