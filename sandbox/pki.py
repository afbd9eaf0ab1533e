"""A small PKI for the sandbox: one CA per purpose, and certificates with the SANs and key usages that
kube-apiserver, etcd (peer and client, mutual TLS) and the HTTPS cloud emulators need.

etcd's JSON gateway dials its own gRPC server with the server certificate as a client certificate, so
etcd serving certificates carry both serverAuth and clientAuth.
"""

import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER = "server"
CLIENT = "client"
PEER = "peer"  # server and client at once
_USAGES = {
    SERVER: [ExtendedKeyUsageOID.SERVER_AUTH],
    CLIENT: [ExtendedKeyUsageOID.CLIENT_AUTH],
    PEER: [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
}


def _name(common_name, organization=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _write_key(path, key):
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


class CA:
    """A certificate authority whose key and certificate live in `directory` as <name>.crt/.key."""

    def __init__(self, directory, name="ca"):
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.cert_path = self.directory / (name + ".crt")
        self.key_path = self.directory / (name + ".key")
        if self.cert_path.exists() and self.key_path.exists():
            self.key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
            self.cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        else:
            self._create()

    def _create(self):
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name("kubenodes sandbox %s" % self.name)
        ski = x509.SubjectKeyIdentifier.from_public_key(self.key.public_key())
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(self.key, hashes.SHA256())
        )
        _write_key(self.key_path, self.key)
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name, common_name, kind=SERVER, hosts=(), organization=None, days=3650):
        """Write <name>.crt and <name>.key next to the CA; return (cert path, key path).
        `hosts` are DNS names or IP addresses for the SAN."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        sans = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization)).issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                         crl_sign=False, content_commitment=False, data_encipherment=False,
                                         key_agreement=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(_USAGES[kind]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path = self.directory / (name + ".crt")
        key_path = self.directory / (name + ".key")
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
        return cert_path, key_path


def rsa_keypair(directory, name):
    """An RSA key pair as <name>.key / <name>.pub (the service-account signing key)."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    directory = pathlib.Path(directory)
    key_path, pub_path = directory / (name + ".key"), directory / (name + ".pub")
    if not key_path.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
        pub_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
    return key_path, pub_path
