"""TLS certificates and SuperNode key pairs for a federation (tests and small deployments).

What Flower 1.42's deployment engine needs, made with ``cryptography`` only::

    <out>/ca.pem                 the CA certificate: every node and the flwr CLI trust it
    <out>/ca.key                 the CA's private key (0600): keep it offline, it signs the SuperLink cert
    <out>/superlink.pem, .key    the SuperLink's TLS certificate (SANs: the hosts given) and key (0600)
    <out>/nodes/<name>.key       one SuperNode's private key, OpenSSH ECDSA P-384 (0600): stays at the node
    <out>/nodes/<name>.pub       its public key, OpenSSH: the coordinator registers it

Keys are ECDSA (P-384), which gRPC's TLS and Flower's SuperNode authentication both take;
generating them is instant, unlike 4096-bit RSA. Institutions with their own PKI pass their
own CA, certificate and keys instead (README, "Training across institutions"); a node can
also make only its own key pair (:func:`make_node_key`) and send the public half.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Credentials", "make_credentials", "make_node_key"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Credentials:
    """Where :func:`make_credentials` put each file."""

    ca_cert: Path
    ca_key: Path
    superlink_cert: Path
    superlink_key: Path
    node_keys: dict[str, tuple[Path, Path]]  # name -> (private key, public key)


def _write(path: Path, data: bytes, *, private: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600 if private else 0o644)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_node_key(private_path: Path, public_path: Path | None = None) -> tuple[Path, Path]:
    """A SuperNode key pair in OpenSSH format (what ``flower-supernode`` and ``flwr supernode register`` read)."""
    private_path = Path(private_path)
    public_path = Path(public_path) if public_path is not None else private_path.with_suffix(".pub")
    key = ec.generate_private_key(ec.SECP384R1())
    _write(private_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                           serialization.NoEncryption()), private=True)
    _write(public_path, key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                      serialization.PublicFormat.OpenSSH) + b"\n", private=False)
    return private_path, public_path


def make_credentials(out_dir: Path, *, nodes: Sequence[str], hosts: Sequence[str] = ("127.0.0.1", "localhost"),
                     days: int = 365) -> Credentials:
    """A CA, a SuperLink certificate valid for ``hosts``, and one key pair per node name, under ``out_dir``.

    Refuses to overwrite an existing CA (a second CA would silently invalidate every
    certificate and registration made with the first).
    """
    out_dir = Path(out_dir)
    bad = [n for n in nodes if not _NAME.match(n)]
    if bad or len(set(nodes)) != len(nodes):
        raise ValueError(f"node names must be unique and match {_NAME.pattern}; got {list(nodes)}")
    if not hosts or days < 1:
        raise ValueError("need at least one host for the SuperLink certificate and days >= 1")
    if (out_dir / "ca.pem").exists():
        raise FileExistsError(f"{out_dir / 'ca.pem'} exists; refusing to replace a CA (use another folder)")
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedcd federation"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "fedcd federation CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA384()))
    link_key = ec.generate_private_key(ec.SECP384R1())
    link = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(link_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA384()))
    creds = Credentials(ca_cert=out_dir / "ca.pem", ca_key=out_dir / "ca.key", superlink_cert=out_dir / "superlink.pem",
                        superlink_key=out_dir / "superlink.key", node_keys={})
    _write(creds.ca_key, _pem_key(ca_key), private=True)
    _write(creds.ca_cert, ca.public_bytes(serialization.Encoding.PEM), private=False)
    _write(creds.superlink_key, _pem_key(link_key), private=True)
    _write(creds.superlink_cert, link.public_bytes(serialization.Encoding.PEM), private=False)
    for name in nodes:
        creds.node_keys[name] = make_node_key(out_dir / "nodes" / f"{name}.key", out_dir / "nodes" / f"{name}.pub")
    return creds
