"""The one redaction helper (tidings/redact.py): URLs as the reference shows them (host:port in
/varz, `user:xxxxx@` in logs) and CONNECTs as its -V trace shows them, also for the forms a
plain pattern would let through (a field named "password", an escaped quote, a line cut
short, a value that is not a string)."""

from __future__ import annotations

import pytest

from tidings.redact import redact_connect, redact_url, url_host


@pytest.mark.parametrize(("url", "host", "redacted"), [
    ("nats://ruser:secret@127.0.0.1:4222", "127.0.0.1:4222", "nats://ruser:xxxxx@127.0.0.1:4222"),
    ("nats-route://ruser:secret@[::1]:6222/", "[::1]:6222", "nats-route://ruser:xxxxx@[::1]:6222/"),
    ("nats://127.0.0.1:4222", "127.0.0.1:4222", "nats://127.0.0.1:4222"),
    ("127.0.0.1:4222", "127.0.0.1:4222", "127.0.0.1:4222"),
    ("ruser:secret@h:1", "h:1", "ruser:xxxxx@h:1"),
    ("nats://a-token@h:1", "h:1", "nats://xxxxx@h:1"),  # a user alone is a token
    ("nats://ruser:sec@ret@h:1", "h:1", "nats://ruser:xxxxx@h:1"),
    ("nats://ruser:secret@h:99999", "h:99999", "nats://ruser:xxxxx@h:99999"),
])
def test_urls(url: str, host: str, redacted: str) -> None:
    assert url_host(url) == host
    assert redact_url(url) == redacted
    assert "sec" not in url_host(url) + redact_url(url) and "token" not in redact_url(url)


@pytest.mark.parametrize(("arg", "shown"), [
    ('{"user":"a","pass":"pw"}', '{"user":"a","pass":"[REDACTED]"}'),
    ('{"pass" : "pw", "password":"pw2"}', '{"pass" : "[REDACTED]", "password":"[REDACTED]"}'),
    ('{"auth_token":"t","sig":"s","nkey":"U1","jwt":"e.y.j"}',
     '{"auth_token":"[REDACTED]","sig":"[REDACTED]","nkey":"[REDACTED]","jwt":"[REDACTED]"}'),
    ('{"pass":"a\\"b,c"}', '{"pass":"[REDACTED]"}'),
    ('{"pass":"cut short', '{"pass":"[REDACTED]"'),
    ('{"pass":12345}', '{"pass":[REDACTED]}'),
    ('{"name":"pass","PASS":"pw"}', '{"name":"pass","PASS":"[REDACTED]"}'),
    ('{"verbose":false}', '{"verbose":false}'),
])
def test_connect(arg: str, shown: str) -> None:
    assert redact_connect(arg) == shown
