"""TLS without sockets: the names a client certificate gives verify_and_map (in the order
nats-server's auth.go tries them, the subject as Go prints it), the `tls { }` block and the
--tls* flags onto TLSOptions, and the defaults TLS changes (the auth timeout)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import trustme

from tidings.config import ConfigError, parse
from tidings.config.flags import add_server_arguments, options_from_args
from tidings.config.server import ServerOptions, apply_server_config
from tidings.config.tls import AUTO_FALLBACK, parse_tls_block
from tidings.server.tls import certificate_identities, go_subject

# -- certificate_identities ----------------------------------------------------------------


def test_emails_then_dns_names_then_uris_then_the_subject() -> None:
    peercert = {
        "subject": ((("organizationName", "Acme"),), (("organizationalUnitName", "Eng"),),
                    (("commonName", "alice"),)),
        "subjectAltName": (("DNS", "a.example.com"), ("email", "alice@example.com"),
                           ("URI", "spiffe://acme/alice"), ("IP Address", "10.0.0.1"),
                           ("DNS", "b.example.com"), ("email", "al@example.com")),
    }
    assert certificate_identities(peercert) == [
        "alice@example.com", "al@example.com", "a.example.com", "b.example.com",
        "spiffe://acme/alice", "CN=alice,OU=Eng,O=Acme",
    ]


def test_subject_in_gos_fixed_order_whatever_the_certificates() -> None:
    """Go's Name.ToRDNSequence writes C, ST, L, STREET, POSTALCODE, O, OU, CN, SERIALNUMBER
    (several values of one type as one RDN joined by "+"), String() the last RDN first."""
    rdns = [[("commonName", "first")], [("countryName", "NL")],
            [("organizationName", "B"), ("organizationName", "A")],
            [("localityName", "Delft")], [("serialNumber", "42")],
            [("commonName", "last")], [("stateOrProvinceName", "ZH")],
            [("postalCode", "2611")], [("streetAddress", "Markt 1")],
            [("organizationalUnitName", "Eng")]]
    assert go_subject(rdns) == ("SERIALNUMBER=42,CN=last,OU=Eng,O=B+O=A,POSTALCODE=2611,"
                                "STREET=Markt 1,L=Delft,ST=ZH,C=NL")


def test_attributes_go_leaves_out_and_domain_components() -> None:
    """emailAddress, userId and the like are not in Go's sequence; domain components are
    tried appended to the subject ("...,DC=a,DC=b", in the certificate's order) before it."""
    peercert = {"subject": ((("domainComponent", "example"),), (("domainComponent", "org"),),
                            (("userId", "u1"),), (("emailAddress", "x@example.org"),),
                            (("commonName", "svc"),))}
    assert certificate_identities(peercert) == ["CN=svc,DC=example,DC=org", "CN=svc"]


@pytest.mark.parametrize("value, printed", [
    ("a,b", "a\\,b"), ("a+b", "a\\+b"), ('say "hi"', 'say \\"hi\\"'), ("a\\b", "a\\\\b"),
    ("<x>;", "\\<x\\>\\;"), (" pad ", "\\ pad\\ "), ("in side", "in side"), ("#1", "\\#1"),
    ("a#1", "a#1"), ("é ", "é\\ "),
])
def test_values_escaped_as_go_escapes_them(value: str, printed: str) -> None:
    assert go_subject([[("commonName", value)]]) == f"CN={printed}"


def test_no_names() -> None:
    assert certificate_identities({}) == []
    assert certificate_identities({"subject": ((("userId", "u"),),)}) == []


# -- the tls block ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(d / "ca.pem")
    cert = ca.issue_cert("localhost")
    cert.cert_chain_pems[0].write_to_path(d / "cert.pem")
    cert.private_key_pem.write_to_path(d / "key.pem")
    return {"cert": str(d / "cert.pem"), "key": str(d / "key.pem"), "ca": str(d / "ca.pem"),
            "dir": str(d)}


def options(text: str) -> ServerOptions:
    return apply_server_config(ServerOptions(), parse(text, "t.conf"))


def block(files: dict[str, str], extra: str = "") -> str:
    return f'tls {{\n  cert_file: "{files["cert"]}"\n  key_file: "{files["key"]}"\n{extra}}}\n'


def test_block_keys(files: dict[str, str]) -> None:
    opts = options(block(files, f'  ca_file: "{files["ca"]}"\n  verify_and_map: true\n'
                                '  timeout: "500ms"\n  handshake_first: true\n'
                                '  min_version: "1.3"\n'))
    tls = opts.tls
    assert tls is not None
    assert (tls.cert_file, tls.key_file, tls.ca_file) == (files["cert"], files["key"],
                                                          files["ca"])
    assert (tls.verify, tls.verify_and_map, tls.timeout, tls.handshake_first,
            tls.handshake_first_fallback, tls.min_version) == (True, True, 0.5, True, 0, "1.3")
    # The reference's default auth timeout with TLS: TLS timeout + 1 s; an explicit one stays.
    assert opts.auth_timeout == 1.5
    assert options(block(files) + "authorization { timeout: 5 }\n").auth_timeout == 5


@pytest.mark.parametrize("value, first, fallback", [
    ("false", False, 0.0), ('"on"', True, 0.0), ('"auto"', True, AUTO_FALLBACK),
    ('"300ms"', True, 0.3),
])
def test_handshake_first_forms(files: dict[str, str], value: str, first: bool,
                               fallback: float) -> None:
    tls = options(block(files, f"  handshake_first: {value}\n")).tls
    assert tls is not None
    assert (tls.handshake_first, tls.handshake_first_fallback) == (first, fallback)


@pytest.mark.parametrize("extra, message", [
    ("  bogus: 1\n", 't.conf:4:3: unknown field "bogus"'),
    ("  verify: 1\n", "t.conf:4:3: error parsing tls config, expected 'verify' to be a boolean"),
    ('  handshake_first: "x"\n', "t.conf:4:3: field \"handshake_first\"'s value \"x\" is invalid"),
    ('  cipher_suites: ["TLS_AES_128_GCM_SHA256"]\n', 't.conf:4:3: "cipher_suites": choosing'),
    ('  pinned_certs: []\n', 't.conf:4:3: "pinned_certs": pinned certificates are not'),
    ('  min_version: "1.1"\n', "unsupported TLS version: 1.1"),
    ('  timeout: "soon"\n', "t.conf:4:3: error parsing tls config, 'timeout'"),
])
def test_block_errors(files: dict[str, str], extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        options(block(files, extra))
    assert message in str(err.value)


def test_files_checked_when_read(files: dict[str, str]) -> None:
    missing = str(Path(files["dir"]) / "missing.pem")
    with pytest.raises(ConfigError) as err:
        options(f'tls {{\n  cert_file: "{missing}"\n  key_file: "{files["key"]}"\n}}\n')
    assert str(err.value).endswith(f': "tls": error parsing X509 certificate/key pair: '
                                   f"open {missing}: no such file or directory")
    assert str(err.value).startswith("t.conf:1:")  # where the block is
    with pytest.raises(ConfigError, match="missing 'key_file' in TLS configuration"):
        options(f'tls {{ cert_file: "{files["cert"]}" }}\n')
    with pytest.raises(ConfigError, match="failed to parse root ca certificate"):
        options(block(files, f'  ca_file: "{files["key"]}"\n'))
    with pytest.raises(ConfigError, match="pair: no PEM data"):
        options(f'tls {{\n  cert_file: "{files["key"]}"\n  key_file: "{files["key"]}"\n}}\n')


def test_cluster_tls_and_https_port(files: dict[str, str]) -> None:
    opts = options(block(files) + "https_port: 8443\ncluster {\n  port: 6222\n"
                   + block(files, "  insecure: true\n") + "}\n")
    assert opts.https_port == 8443
    assert opts.cluster_tls is not None and opts.cluster_tls.insecure
    assert options(block(files) + 'https: "127.0.0.1:9443"\n').https_port == 9443
    assert parse_tls_block(parse(block(files), "t.conf")["tls"]).timeout == 2.0


# -- flags ----------------------------------------------------------------------------------------
def flags(*argv: str, base: ServerOptions | None = None) -> ServerOptions:
    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    return options_from_args(parser.parse_args(list(argv)), base)


def test_tls_flags(files: dict[str, str]) -> None:
    opts = flags("--tlsverify", "--tlscert", files["cert"], "--tlskey", files["key"],
                 "--tlscacert", files["ca"])
    assert opts.tls is not None and opts.tls.verify and opts.tls.ca_file == files["ca"]
    assert opts.auth_timeout == 3.0
    assert flags("--tls", "--tlscert", files["cert"], "--tlskey", files["key"],
                 "--auth_timeout", "7").auth_timeout == 7
    with pytest.raises(ValueError, match="TLS Server certificate must be present and valid"):
        flags("--tls")
    with pytest.raises(ValueError, match="TLS Server private key must be present and valid"):
        flags("--tls", "--tlscert", files["cert"])
    base = options(block(files, "  timeout: 4\n  handshake_first: true\n"))
    assert flags("--tls=false", base=base).tls is None
    again = flags("--tlscert", files["cert"], "--tlskey", files["key"], base=base).tls
    assert again is not None and (again.timeout, again.handshake_first) == (4.0, True)


def test_https_needs_tls(files: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="TLS cert and key required for HTTPS"):
        flags("--https_port", "8443")
    with pytest.raises(ValueError, match=r"can't specify both HTTP \(8222\) and HTTPs \(8443\)"):
        flags("-m", "8222", "-ms", "8443", "--tls", "--tlscert", files["cert"], "--tlskey",
              files["key"])
