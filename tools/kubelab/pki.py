"""Certificates and keys of a lab: a cluster CA, a front-proxy CA, an etcd CA and the certs made from them.

Everything is generated here with the ``cryptography`` package (no shell, no
openssl strings) and written owner-only under ``DIR/pki``; an existing file is
kept, so a lab restarted on the same directory keeps its identity.
"""

import datetime
import ipaddress
import os
import secrets

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 3650
SERVING_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
SERVING_ADDRESSES = ("127.0.0.1", "::1", "10.0.0.1")   # 10.0.0.1: the `kubernetes` Service's ClusterIP (never routed)


def _write(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _load(path):
    with open(path, "rb") as handle:
        return handle.read()


def _new_key():
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name, organization=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(subject, issuer, public_key):
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS)))


def ensure_ca(directory, name, common_name):
    """``name.crt``/``name.key``: a self-signed CA; returns (cert, key) objects."""
    crt, key_path = os.path.join(directory, name + ".crt"), os.path.join(directory, name + ".key")
    if os.path.exists(crt) and os.path.exists(key_path):
        return (x509.load_pem_x509_certificate(_load(crt)),
                serialization.load_pem_private_key(_load(key_path), password=None))
    key = _new_key()
    subject = _name(common_name)
    cert = (_builder(subject, subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write(key_path, _key_pem(key))
    _write(crt, cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def ensure_leaf(directory, name, ca, common_name, *, server=False, client=False,  # pylint: disable=too-many-arguments,too-many-locals
                organization=None, dns=(), addresses=()):
    """``name.crt``/``name.key`` signed by ``ca`` (a (cert, key) pair); returns the two paths."""
    crt, key_path = os.path.join(directory, name + ".crt"), os.path.join(directory, name + ".key")
    if os.path.exists(crt) and os.path.exists(key_path):
        return crt, key_path
    ca_cert, ca_key = ca
    key = _new_key()
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (_builder(_name(common_name, organization), ca_cert.subject, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False, crl_sign=False,
                                            content_commitment=False, data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    alt = [x509.DNSName(item) for item in dns] + [x509.IPAddress(ipaddress.ip_address(item)) for item in addresses]
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(key_path, _key_pem(key))
    _write(crt, cert.public_bytes(serialization.Encoding.PEM))
    return crt, key_path


def ensure_service_account_key(directory):
    """``sa.key``/``sa.pub``: the key that signs service account tokens and its public half that verifies them.

    (--service-account-key-file takes public keys only: a PKCS#8 private key there is refused with "data does not
    contain any valid RSA or ECDSA public keys".)
    """
    path, pub = os.path.join(directory, "sa.key"), os.path.join(directory, "sa.pub")
    if not (os.path.exists(path) and os.path.exists(pub)):
        key = _new_key()
        _write(path, _key_pem(key))
        _write(pub, key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return path, pub


def ensure_token(path):
    """A random bearer token kept in ``path`` (owner-only)."""
    if os.path.exists(path):
        return _load(path).decode().strip()
    token = secrets.token_urlsafe(32)
    _write(path, token.encode() + b"\n")
    return token


def make_all(directory):
    """Create (or keep) every file of a lab's PKI in ``directory``; return {purpose: path}."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    ca = ensure_ca(directory, "ca", "converge-virt-kubelab-ca")
    front = ensure_ca(directory, "front-proxy-ca", "converge-virt-kubelab-front-proxy-ca")
    paths = {"ca": os.path.join(directory, "ca.crt"), "front_proxy_ca": os.path.join(directory, "front-proxy-ca.crt")}
    paths["apiserver_crt"], paths["apiserver_key"] = ensure_leaf(directory, "apiserver", ca, "kube-apiserver", server=True,
                                                                 dns=SERVING_NAMES, addresses=SERVING_ADDRESSES)
    paths["proxy_client_crt"], paths["proxy_client_key"] = ensure_leaf(directory, "front-proxy-client", front,
                                                                       "front-proxy-client", client=True)
    # etcd: its own CA; client certificate authentication on the client and the peer port
    etcd_ca = ensure_ca(directory, "etcd-ca", "converge-virt-kubelab-etcd-ca")
    paths["etcd_ca"] = os.path.join(directory, "etcd-ca.crt")
    paths["etcd_crt"], paths["etcd_key"] = ensure_leaf(directory, "etcd-server", etcd_ca, "etcd", server=True, client=True,
                                                       dns=("localhost",), addresses=("127.0.0.1",))
    paths["etcd_client_crt"], paths["etcd_client_key"] = ensure_leaf(directory, "apiserver-etcd-client", etcd_ca,
                                                                     "kube-apiserver-etcd-client", client=True)
    paths["sa_key"], paths["sa_pub"] = ensure_service_account_key(directory)
    return paths
