"""The pytest plugin of tidings: NATS servers as fixtures (registered as `pytest11`).

Fixtures (see docs/testing.md):

- ``nats_server``, ``nats_url``, ``streaming_server``, ``nats_server_factory``: one test's.
  In an async test (pytest-asyncio) the server runs on the test's own event loop; in a
  sync test it is a `tidings server` subprocess. ``@pytest.mark.tidings(mode=..., **options)``
  chooses (``mode="subprocess"`` or ``"inprocess"``) and sets the options.
- ``nats_server_module``, ``nats_server_session``, ``streaming_server_module``,
  ``streaming_server_session``, ``nats_server_factory_module``, ``nats_server_factory_session``:
  shared subprocess servers (they outlive any one test's event loop).

A failed test's report shows the log of each subprocess server it used (an in-process
server's is in pytest's "Captured log" sections: the "tidings" logger is at INFO while it
runs). Importing this module imports
neither asyncio's server code nor the server: that happens in the fixtures, when used.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import pytest_asyncio
except ImportError:  # in-process servers need pytest-asyncio; subprocess ones do not
    pytest_asyncio = None
if pytest_asyncio is not None and "loop_scope" not in inspect.signature(
        pytest_asyncio.fixture).parameters:
    pytest_asyncio = None  # before 0.24: no loop scopes, so subprocess servers only

LOG_LIMIT = 20_000  # characters of a server's log in a failed test's report
_LOOP_SCOPES = ("function", "class", "module", "package", "session")
_started: weakref.WeakSet[Any] = weakref.WeakSet()  # every server the fixtures started
_OFFSETS = pytest.StashKey[dict[int, int]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    help_text = ("where the function-scoped tidings fixtures run their servers: auto "
                 "(in-process for async tests, a subprocess for sync ones) or subprocess")
    parser.getgroup("tidings").addoption(
        "--tidings-mode", dest="tidings_mode", choices=("auto", "subprocess"), default=None,
        help=help_text)
    parser.addini("tidings_mode", help_text, default="auto")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "tidings(mode=None, **options): options of the tidings server fixtures "
        "(user, password, token, max_payload, config, streaming, store, cluster, ...); "
        "mode='inprocess' or 'subprocess'")


# -- choosing --------------------------------------------------------------------------------
def _marker_options(node: Any, **defaults: Any) -> dict[str, Any]:
    marker = node.get_closest_marker("tidings")
    return {**defaults, **(marker.kwargs if marker else {})}


def _is_async_test(request: pytest.FixtureRequest) -> bool:
    item = request.node
    return (pytest_asyncio is not None
            and request.config.pluginmanager.has_plugin("asyncio")
            and inspect.iscoroutinefunction(getattr(item, "obj", None))
            and item.get_closest_marker("asyncio") is not None)


def _mode(request: pytest.FixtureRequest, options: dict[str, Any]) -> str:
    mode = (options.pop("mode", None) or request.config.getoption("tidings_mode")
            or request.config.getini("tidings_mode") or "auto")
    is_async = _is_async_test(request)
    if mode == "auto":
        return "inprocess" if is_async else "subprocess"
    if mode == "inprocess" and not is_async:
        raise pytest.UsageError(f"{request.node.nodeid}: an in-process tidings server needs "
                                "an async test (pytest-asyncio) to run on")
    if mode not in ("inprocess", "subprocess"):
        raise pytest.UsageError(f"tidings: unknown mode {mode!r}")
    return mode


def _loop_scope(request: pytest.FixtureRequest) -> str:
    """The scope of the event loop the test runs in, as pytest-asyncio decides it."""
    marker = request.node.get_closest_marker("asyncio")
    scope = marker and (marker.kwargs.get("loop_scope") or marker.kwargs.get("scope"))
    if not scope:
        try:
            scope = request.config.getini("asyncio_default_test_loop_scope")
        except ValueError:
            scope = None
    return scope or "function"


# -- starting --------------------------------------------------------------------------------
def _spec(tmp: pytest.TempPathFactory, options: dict[str, Any]) -> tuple[Any, Path]:
    from .spec import ServerSpec

    workdir = tmp.mktemp("tidings-server")
    spec = ServerSpec.from_kwargs(**options)
    if spec.streaming and not spec.store_dir and spec.store != "memory":
        spec.store_dir = str(workdir / "store")
    return spec, workdir


class SubprocessFactory:
    """Calling it starts a subprocess server with the options given (ServerSpec's keywords:
    user, password, token, max_payload, config, streaming, store, cluster, routes, ...).
    Every server it started is stopped when its fixture ends."""

    def __init__(self, tmp: pytest.TempPathFactory, defaults: dict[str, Any] | None = None):
        self.tmp = tmp
        self.defaults = defaults or {}
        self.servers: list[Any] = []

    def __call__(self, **options: Any) -> Any:
        from .process import SubprocessServer

        if options.pop("mode", "subprocess") == "inprocess":
            raise pytest.UsageError("an in-process tidings server needs an async test")
        server = SubprocessServer(*_spec(self.tmp, {**self.defaults, **options}))
        self.servers.append(server)
        _started.add(server)
        return server.start()

    def cluster(self, size: int = 3, **options: Any) -> list[Any]:
        """`size` servers routed to the first (a full mesh once they have met), each with
        `options`; streaming off unless asked for (one streaming server per cluster id)."""
        options = {"cluster_name": "tidings-test", "streaming": False, **options}
        first = self(cluster=True, **options)
        return [first, *(self(cluster=True, routes=[first], **options)
                         for _ in range(size - 1))]

    def close(self) -> None:
        for server in self.servers:
            server.stop()


class InProcessFactory:
    """The factory of an async test: `await factory(**options)` starts a server on the
    test's loop (or, with mode="subprocess", a subprocess server started off the loop)."""

    def __init__(self, tmp: pytest.TempPathFactory, defaults: dict[str, Any] | None = None):
        self.tmp = tmp
        self.defaults = defaults or {}
        self.servers: list[Any] = []

    async def __call__(self, **options: Any) -> Any:
        import asyncio

        if options.pop("mode", "inprocess") == "subprocess":
            sub = SubprocessFactory(self.tmp, self.defaults)
            server = await asyncio.to_thread(sub, **options)
            self.servers.append(server)
            return server
        from .inprocess import InProcessServer

        server = InProcessServer(*_spec(self.tmp, {**self.defaults, **options}))
        self.servers.append(server)
        _started.add(server)
        return await server.start()

    async def cluster(self, size: int = 3, **options: Any) -> list[Any]:
        """`size` servers routed to the first (see SubprocessFactory.cluster)."""
        options = {"cluster_name": "tidings-test", "streaming": False, **options}
        first = await self(cluster=True, **options)
        return [first, *[await self(cluster=True, routes=[first], **options)
                         for _ in range(size - 1)]]

    async def aclose(self) -> None:
        import asyncio

        for server in self.servers:
            if server.mode == "subprocess":
                await asyncio.to_thread(server.stop)
            else:
                await server.stop()


def _subprocess_server(request: pytest.FixtureRequest, tmp: pytest.TempPathFactory,
                       options: dict[str, Any]) -> Any:
    factory = SubprocessFactory(tmp)
    request.addfinalizer(factory.close)
    return factory(**options)


def _function_server(request: pytest.FixtureRequest, kind: str, **defaults: Any) -> Any:
    options = _marker_options(request.node, **defaults)
    if _mode(request, options) == "inprocess":
        return request.getfixturevalue(f"_tidings_inprocess_{kind}_{_loop_scope(request)}")
    tmp = request.getfixturevalue("tmp_path_factory")
    if kind == "factory":
        factory = SubprocessFactory(tmp, options)
        request.addfinalizer(factory.close)
        return factory
    return _subprocess_server(request, tmp, options)


def _define_inprocess_fixtures(loop_scope: str) -> dict[str, Any]:
    """In-process servers and factories for tests whose event loop has `loop_scope`."""
    assert pytest_asyncio is not None

    async def factory(request: pytest.FixtureRequest,
                      tmp_path_factory: pytest.TempPathFactory) -> Any:
        options = _marker_options(request.node)
        options.pop("mode", None)
        made = InProcessFactory(tmp_path_factory, options)
        try:
            yield made
        finally:
            await made.aclose()

    def server_of(**defaults: Any) -> Callable[..., Any]:
        async def server(request: pytest.FixtureRequest,
                         tmp_path_factory: pytest.TempPathFactory) -> Any:
            options = _marker_options(request.node, **defaults)
            options.pop("mode", None)
            made = InProcessFactory(tmp_path_factory)
            try:
                yield await made(**options)
            finally:
                await made.aclose()
        return server

    made = {"factory": factory, "server": server_of(),
            "streaming": server_of(streaming=True)}
    out = {}
    for kind, func in made.items():
        name = f"_tidings_inprocess_{kind}_{loop_scope}"
        func.__name__ = name
        out[name] = pytest_asyncio.fixture(func, loop_scope=loop_scope, name=name)
    return out


if pytest_asyncio is not None:
    for _scope in _LOOP_SCOPES:
        globals().update(_define_inprocess_fixtures(_scope))


# -- the fixtures ----------------------------------------------------------------------------
@pytest.fixture
def nats_server(request: pytest.FixtureRequest) -> Any:
    """A running tidings server (no streaming) for one test: .url, .host, .port, .options,
    .restart(), .stop(), .log(). In-process in async tests, a subprocess in sync ones."""
    return _function_server(request, "server")


@pytest.fixture
def nats_url(nats_server: Any) -> str:
    """The URL of `nats_server`: nats://127.0.0.1:<port>."""
    return str(nats_server.url)


@pytest.fixture
def streaming_server(request: pytest.FixtureRequest) -> Any:
    """A tidings server with embedded NATS Streaming (file store in a fresh directory, kept
    by restart()): also .cluster_id, .store, .store_dir."""
    return _function_server(request, "streaming", streaming=True)


@pytest.fixture
def nats_server_factory(request: pytest.FixtureRequest) -> Any:
    """Start more servers: `factory(**options)` (sync tests) or `await factory(**options)`
    (async tests); all are stopped after the test."""
    return _function_server(request, "factory")


def _shared(request: pytest.FixtureRequest, tmp: pytest.TempPathFactory,
            **defaults: Any) -> Any:
    options = _marker_options(request.node, **defaults)
    options.pop("mode", None)
    return _subprocess_server(request, tmp, options)


@pytest.fixture(scope="module")
def nats_server_module(request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A subprocess server shared by the tests of a module (options: the module's
    `pytestmark = pytest.mark.tidings(...)`)."""
    return _shared(request, tmp_path_factory)


@pytest.fixture(scope="session")
def nats_server_session(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A subprocess server shared by the whole test session."""
    return _shared(request, tmp_path_factory)


@pytest.fixture(scope="module")
def streaming_server_module(request: pytest.FixtureRequest,
                            tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A subprocess server with streaming, shared by the tests of a module."""
    return _shared(request, tmp_path_factory, streaming=True)


@pytest.fixture(scope="session")
def streaming_server_session(request: pytest.FixtureRequest,
                             tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A subprocess server with streaming, shared by the whole test session."""
    return _shared(request, tmp_path_factory, streaming=True)


@pytest.fixture(scope="module")
def nats_server_factory_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A factory of subprocess servers stopped at the end of the module: for module-scoped
    fixtures of your own (`@pytest.fixture(scope="module")`)."""
    factory = SubprocessFactory(tmp_path_factory)
    yield factory
    factory.close()


@pytest.fixture(scope="session")
def nats_server_factory_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A factory of subprocess servers stopped at the end of the session."""
    factory = SubprocessFactory(tmp_path_factory)
    yield factory
    factory.close()


# -- logs in the report ----------------------------------------------------------------------
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    if _started:
        # Where each shared server's log stands: a failure shows only this test's part.
        item.stash[_OFFSETS] = {id(s): s.log_size() for s in _started}
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and _started:
        offsets = item.stash.get(_OFFSETS, {})
        # pytest's own "Captured log" sections hold an in-process server's log already.
        in_log = item.config.pluginmanager.has_plugin("logging-plugin")
        for server in _servers_used(item):
            if server.mode == "inprocess" and in_log:
                continue
            text = server.log(offsets.get(id(server), 0))
            if len(text) > LOG_LIMIT:
                text = "...\n" + text[-LOG_LIMIT:]
            report.sections.append((f"tidings server {server.url} ({server.mode}) log",
                                    text or "(nothing logged)\n"))
    return report


def _servers_used(item: pytest.Item) -> list[Any]:
    ours = {id(s): s for s in _started}
    found: dict[int, Any] = {}
    for value in getattr(item, "funcargs", {}).values():
        if id(value) in ours:
            found[id(value)] = value
        elif isinstance(value, SubprocessFactory | InProcessFactory):
            found.update((id(s), s) for s in value.servers if id(s) in ours)
    return list(found.values())
