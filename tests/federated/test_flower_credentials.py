"""`fedcd federation certs`: a CA, a SuperLink certificate for the given hosts, node key pairs Flower accepts."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

from federated.flower import make_credentials, make_node_key


def test_credentials_chain_to_the_ca_and_keys_are_private(tmp_path: Path) -> None:
    # Execute
    creds = make_credentials(tmp_path, nodes=["a", "b"], hosts=["127.0.0.1", "coordinator.example.org"])

    # Assert: the SuperLink certificate is signed by the CA and names both hosts
    ca = x509.load_pem_x509_certificate(creds.ca_cert.read_bytes())
    link = x509.load_pem_x509_certificate(creds.superlink_cert.read_bytes())
    link.verify_directly_issued_by(ca)
    sans = link.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert sans.get_values_for_type(x509.DNSName) == ["coordinator.example.org"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # ... private keys are 0600, and node keys are OpenSSH EC keys (what flower-supernode and flwr read)
    for path in (creds.ca_key, creds.superlink_key, *(k for k, _ in creds.node_keys.values())):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    private, public = creds.node_keys["a"]
    key = load_ssh_private_key(private.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert load_ssh_public_key(public.read_bytes()).public_numbers() == key.public_key().public_numbers()


def test_an_existing_ca_is_never_replaced_and_names_are_checked(tmp_path: Path) -> None:
    make_credentials(tmp_path, nodes=["a"])
    with pytest.raises(FileExistsError, match="refusing to replace a CA"):
        make_credentials(tmp_path, nodes=["b"])
    with pytest.raises(ValueError, match="unique"):
        make_credentials(tmp_path / "other", nodes=["a", "a"])
    with pytest.raises(ValueError, match="must be unique and match"):
        make_credentials(tmp_path / "other", nodes=["../escape"])


def test_a_node_makes_its_own_key_pair(tmp_path: Path) -> None:
    private, public = make_node_key(tmp_path / "mine.key")
    assert public == tmp_path / "mine.pub" and public.read_text().startswith("ecdsa-sha2-nistp384 ")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
