"""TLS as the server runs it: the SSL contexts of the client listener, the HTTPS monitor
and the routes, built from TLSOptions (the `tls { }` block and the --tls* flags are
config/tls.py's), and the names a client certificate gives for verify_and_map.
"""

from __future__ import annotations

import ssl
from typing import Any

from ..config.tls import TLS_VERSIONS, TLSOptions


# -- the contexts -------------------------------------------------------------------------
def server_context(tls: TLSOptions) -> ssl.SSLContext:
    """The server-side context of `tls`: its certificate and key, and with verify (or
    verify_and_map) client certificates required and checked against ca_file."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = TLS_VERSIONS.get(tls.min_version, ssl.TLSVersion.TLSv1_2)
    if tls.cert_file:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file:
        context.load_verify_locations(tls.ca_file)
    if tls.verify or tls.verify_and_map:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def monitor_context(tls: TLSOptions) -> ssl.SSLContext:
    """The HTTPS monitor's: the server's certificate, no client certificate asked for
    (as the reference's monitor)."""
    context = server_context(tls)
    context.verify_mode = ssl.CERT_NONE
    return context


def route_contexts(tls: TLSOptions) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(accepting, soliciting) contexts of the cluster's `tls { }`: as the reference, both
    ends of a route present the certificate and verify the other's against ca_file (the
    system's roots without one); `insecure` skips verifying the server we connect to."""
    accept = server_context(tls)
    accept.verify_mode = ssl.CERT_REQUIRED
    solicit = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file or None)
    solicit.minimum_version = TLS_VERSIONS.get(tls.min_version, ssl.TLSVersion.TLSv1_2)
    if tls.cert_file:
        solicit.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.insecure:
        solicit.check_hostname = False
        solicit.verify_mode = ssl.CERT_NONE
    return accept, solicit


# -- verify_and_map -------------------------------------------------------------------------
# Subject attributes as Go's pkix.Name keeps them, in the order ToRDNSequence writes them
# (Python's names from getpeercert() -> the short names Go prints). Other attributes
# (domainComponent, emailAddress, userId, ...) are not in that sequence.
_RDN_ORDER = (
    ("countryName", "C"),
    ("stateOrProvinceName", "ST"),
    ("localityName", "L"),
    ("streetAddress", "STREET"),
    ("postalCode", "POSTALCODE"),
    ("organizationName", "O"),
    ("organizationalUnitName", "OU"),
)
_SINGLE = (("commonName", "CN"), ("serialNumber", "SERIALNUMBER"))


def certificate_identities(peercert: dict[str, Any]) -> list[str]:
    """The names a client certificate (as `SSLObject.getpeercert()` gives it) offers as user
    names, in the order the reference tries them (server/auth.go, checkClientTLSCertSubject):
    the email addresses, the DNS names and the URIs of its subjectAltName, then its subject
    as Go prints `Name.ToRDNSequence().String()` followed by the domain components
    ("...,DC=example,DC=com") when it has some, then that subject alone."""
    names: list[str] = []
    alt = peercert.get("subjectAltName") or ()
    for kind in ("email", "DNS", "URI"):
        names += [value for typ, value in alt if typ == kind and isinstance(value, str)]
    rdns = [list(rdn) for rdn in peercert.get("subject") or ()]
    subject = go_subject(rdns)
    if subject:
        dcs = [f"DC={value}" for rdn in rdns for attr, value in rdn if attr == "domainComponent"]
        if dcs:
            names.append(subject + "," + ",".join(dcs))
        names.append(subject)
    return names


def go_subject(rdns: list[list[tuple[str, str]]]) -> str:
    """The subject as Go's `pkix.Name.ToRDNSequence().String()`: the known attributes
    regrouped in Go's fixed order (one RDN per attribute type, several values joined by
    "+"; the last CN and serial number only), written last RDN first, RFC 2253 style."""
    values: dict[str, list[str]] = {}
    for rdn in rdns:
        for attr, value in rdn:
            values.setdefault(attr, []).append(value)
    sequence: list[str] = []
    for attr, short in _RDN_ORDER:
        if values.get(attr):
            sequence.append("+".join(f"{short}={_escape(v)}" for v in values[attr]))
    for attr, short in _SINGLE:
        if values.get(attr) and values[attr][-1]:
            sequence.append(f"{short}={_escape(values[attr][-1])}")
    return ",".join(reversed(sequence))


def _escape(value: str) -> str:
    """A value as Go's RDNSequence.String escapes it."""
    out = []
    last = len(value.encode()) - 1
    pos = 0
    for ch in value:
        escape = ch in ',+"\\<>;' or (ch == " " and pos in (0, last)) or (ch == "#" and pos == 0)
        out.append("\\" + ch if escape else ch)
        pos += len(ch.encode())
    return "".join(out)
