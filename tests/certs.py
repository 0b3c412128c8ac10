"""Certificates made at test time (``cryptography``): a CA, and server or client
certificates it signs, written as PEM files. No pytest here."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    cert: Path
    key: Path


@dataclass
class CA:
    cert: Path
    key: Path
    _cert: x509.Certificate
    _key: ec.EllipticCurvePrivateKey

    def issue(self, directory: Path, name: str, *, client: bool = False,
              sans: tuple[str, ...] = ("localhost", "127.0.0.1")) -> Issued:
        """A certificate for ``name`` signed by this CA (a server's for ``sans``, or a client's)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        alt = [x509.IPAddress(ipaddress.ip_address(s)) if _is_ip(s) else x509.DNSName(s) for s in sans]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        )
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(*_write(directory, name, cert, key))


def make_ca(directory: Path, name: str) -> CA:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = _write(directory, name, cert, key)
    return CA(cert_path, key_path, cert, key)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _write(directory: Path, name: str, cert, key) -> tuple[Path, Path]:
    directory = Path(directory)
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


def make_pki(directory: Path) -> dict:
    """A test CA with a server and a client certificate, and a stranger's client
    certificate from another CA."""
    ca, other_ca = make_ca(directory, "test-ca"), make_ca(directory, "other-ca")
    return {
        "dir": directory,
        "ca": ca,
        "server": ca.issue(directory, "server"),
        "client": ca.issue(directory, "client", client=True, sans=()),
        "stranger": other_ca.issue(directory, "stranger", client=True, sans=()),
    }


def channel_credentials(pki: dict, cert: str | None = None):
    """gRPC channel credentials trusting ``pki``'s CA, presenting ``pki[cert]`` (None: no
    client certificate)."""
    import grpc

    c = pki[cert] if cert else None
    return grpc.ssl_channel_credentials(
        root_certificates=pki["ca"].cert.read_bytes(),
        private_key=c.key.read_bytes() if c else None,
        certificate_chain=c.cert.read_bytes() if c else None,
    )
