"""Certificates made at test time (trustme) for the TLS tests: a CA, a server certificate for
127.0.0.1 and localhost, a client certificate with an email address, a DNS name and a
subject, and one from another CA; and the `tls { }` block that uses them."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass
class Certs:
    ca: str
    server: str
    server_key: str
    client: str
    client_key: str
    other: str
    other_key: str

    def context(self, client_cert: bool = False, other: bool = False) -> ssl.SSLContext:
        """A client's context trusting our CA (with a client certificate)."""
        ctx = ssl.create_default_context(cafile=self.ca)
        if client_cert:
            ctx.load_cert_chain(self.client, self.client_key)
        if other:
            ctx.load_cert_chain(self.other, self.other_key)
        return ctx


def make_certs(d: Path) -> Certs:
    """Write the certificates and keys into the folder `d`."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(d / "ca.pem")
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(d / "server.pem")
    server.private_key_pem.write_to_path(d / "server-key.pem")
    client = ca.issue_cert("alice@example.com", "client.example.com", common_name="alice",
                           organization_name="Acme", organization_unit_name="Eng")
    client.cert_chain_pems[0].write_to_path(d / "client.pem")
    client.private_key_pem.write_to_path(d / "client-key.pem")
    other = trustme.CA().issue_cert("mallory@example.com")
    other.cert_chain_pems[0].write_to_path(d / "other.pem")
    other.private_key_pem.write_to_path(d / "other-key.pem")
    return Certs(*(str(d / n) for n in ("ca.pem", "server.pem", "server-key.pem", "client.pem",
                                        "client-key.pem", "other.pem", "other-key.pem")))


def tls_block(certs: Certs, extra: str = "") -> str:
    """A `tls { }` block with the server certificate and the CA (`extra`: more keys)."""
    return (f'tls {{\n  cert_file: "{certs.server}"\n  key_file: "{certs.server_key}"\n'
            f'  ca_file: "{certs.ca}"\n{extra}}}\n')
