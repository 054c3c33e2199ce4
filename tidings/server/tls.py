"""TLS for the server's listeners: the SSL context a `tls { }` block describes."""

from __future__ import annotations

import ssl

from .options import TLSOptions


def server_context(tls: TLSOptions) -> ssl.SSLContext:
    """The server-side context of `tls`: its certificate and key, and with verify (or
    verify_and_map) client certificates required and checked against ca_file."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file:
        context.load_verify_locations(tls.ca_file)
    if tls.verify or tls.verify_and_map:
        context.verify_mode = ssl.CERT_REQUIRED
    return context
