"""The test harness: one way to start servers, one proxy, one set of waits.

- servers.py: tidings (through `tidings.testing`) and the reference nats-server, each on
  ports of its own read back from its log; `start_tidings`, `start_reference`,
  `start_configured`, and `start_inprocess` (tidings on the test's event loop);
- processes.py: other commands, logged and watched the same way (`Process`);
- proxy.py: the TCP proxy with freeze, thaw and drop;
- waits.py: `wait_until`, `eventually`, `wait_listening`, `wait_for_file_line` (a
  server's own log lines: `server.wait_for_log`, `Process.wait_for`);
- ports.py: `refused_port`, a port that refuses connections;
- rawnats.py, wsframes.py: raw-socket NATS and WebSocket clients (exact bytes out, exact
  bytes back) for protocol tests;
- jwts.py: NKeys and NATS JWTs (operator, account, user) for operator-mode tests, `.creds`
  files, and a configuration trusting an operator;
- fixtures.py: the fixtures (tidings_factory, reference_factory, any_server,
  proxy_factory, refused_port, ...), loaded by tests/conftest.py.

Every server picks its own ports, so tests run in parallel (`make test`: pytest-xdist, two
workers, a file's tests on one). Those marked `serial` run alone afterwards: the docs
examples (the checkout's directories are watched for files an example makes), the FT
takeovers (timed against heartbeats), a WebSocket reader that must keep up with a burst.
A restart on the same port (a client reconnecting to its URL) can still find its port
taken: by then it is an ephemeral port any outgoing connection of the machine may get.
"""

from .ports import refused_port
from .processes import (
    Process,
    server_command,
    start_server_process,
    stop_process,
    tidings_command,
)
from .proxy import Proxy
from .servers import (
    InProcessServer,
    ReferenceServer,
    Server,
    TidingsServer,
    nats_server_binary,
    start_configured,
    start_inprocess,
    start_reference,
    start_tidings,
    workdir,
)
from .waits import eventually, wait_for_file_line, wait_listening, wait_until

__all__ = ["InProcessServer", "Process", "Proxy", "ReferenceServer", "Server", "TidingsServer", "eventually",
           "nats_server_binary", "refused_port", "server_command", "start_configured",
           "start_inprocess", "start_reference", "start_server_process", "start_tidings", "stop_process", "tidings_command", "wait_for_file_line",
           "wait_listening", "wait_until", "workdir"]
