"""A stateful Kubernetes API test server with a KubeVirt controller emulation.

Usage from Python::

    from tests.kubeapi import KubeTestServer
    srv = KubeTestServer(step_delay=0.05).start()
    srv.kubeconfig_path            # kubeconfig using the admin token over HTTPS
    srv.write_kubeconfig(path, token=srv.limited_token)
    srv.controller.settle()        # run the emulated controllers to a fixed point
    srv.faults.inject('image_pull', 'default', 'myvm')
    srv.stop()

Modules: ``store`` (apimachinery semantics), ``server`` (HTTP/TLS, auth,
discovery, watch), ``kubevirt`` (controller emulation and virt-api
subresources), ``faults`` (fault injection), ``fixtures`` (pytest plugin),
``__main__`` (command line).  Nothing here imports the collection under test.
"""

# pylint: disable=consider-using-f-string,too-many-arguments,too-many-positional-arguments

import base64
import datetime
import ipaddress
import os
import ssl
import tempfile
import threading

import yaml

from .faults import Faults
from .kubevirt import KUBEVIRT_TYPES, Controller, SubresourceAPI
from .server import CORE_TYPES, App, Handler, TLSSniffingServer
from .store import Store

__all__ = ['KubeTestServer', 'Store', 'Faults', 'Controller']

_CERT_CACHE = {}
_CERT_LOCK = threading.Lock()


def generate_certs():
    """(ca_pem, cert_pem, key_pem): a self-signed CA and a server cert for 127.0.0.1/localhost (cached per process)."""
    with _CERT_LOCK:
        if _CERT_CACHE:
            return _CERT_CACHE['ca'], _CERT_CACHE['cert'], _CERT_CACHE['key']
        # imported lazily: only needed for HTTPS
        from cryptography import x509  # pylint: disable=import-outside-toplevel
        from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
        from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel
        from cryptography.x509.oid import NameOID, ExtendedKeyUsageOID  # pylint: disable=import-outside-toplevel

        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'kubeapi-test-ca')])
        ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                                                decipher_only=False), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
                   .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'kube-apiserver')]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName('localhost'), x509.DNSName('kubernetes.default.svc'),
                                                            x509.IPAddress(ipaddress.ip_address('127.0.0.1'))]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
                .sign(ca_key, hashes.SHA256()))
        _CERT_CACHE['ca'] = ca_cert.public_bytes(serialization.Encoding.PEM)
        _CERT_CACHE['cert'] = cert.public_bytes(serialization.Encoding.PEM)
        _CERT_CACHE['key'] = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        return _CERT_CACHE['ca'], _CERT_CACHE['cert'], _CERT_CACHE['key']


class KubeTestServer:  # pylint: disable=too-many-instance-attributes
    """Store + KubeVirt emulation + HTTP(S) server on one loopback port.

    ``tokens`` maps token -> list of namespaces (``'*'`` = all) or
    ``{'user': name, 'namespaces': [...]}``.  By default two tokens exist:
    ``admin_token`` (everything) and ``limited_token`` (namespace ``demo``).
    """

    real = False    # tests/kubeapi/real.py's RealKubeServer: True

    def __init__(self, host='127.0.0.1', port=0, tokens=None, namespaces=('default', 'demo'), nodes=None, step_delay=0.05, auto=True,
                 kubeconfig_path=None, tls=True):
        self.host = host
        self.port = port
        self.admin_token = 'admin-token'
        self.limited_token = 'limited-token'
        self.tokens = {}
        for token, value in (tokens or {self.admin_token: ['*'], self.limited_token: ['demo']}).items():
            if isinstance(value, dict):
                self.tokens[token] = {'user': value.get('user', token.split('-', maxsplit=1)[0]), 'namespaces': list(value.get('namespaces', []))}
            else:
                self.tokens[token] = {'user': token.split('-', maxsplit=1)[0] if '-' in token else token, 'namespaces': list(value)}
        self.namespaces = list(namespaces)
        self.tls = tls
        self.faults = Faults()
        self.store = Store()
        for rtype in CORE_TYPES + KUBEVIRT_TYPES:
            self.store.register(rtype)
        self.controller = Controller(self.store, self.faults, step_delay=step_delay, auto=auto, nodes=nodes)
        self.subresources = SubresourceAPI(self.controller)
        self.app = App(self.store, self.controller, self.subresources, self.faults, self.tokens)
        self.httpd = None
        self.thread = None
        self.tmpdir = None
        self.kubeconfig_path = kubeconfig_path
        self.ca_pem = None

    # lifecycle -----------------------------------------------------------------------------------
    def start(self):
        """Seed the cluster, start controllers and the listener; returns self."""
        self.tmpdir = tempfile.mkdtemp(prefix='kubeapi-')
        ctx = None
        if self.tls:
            self.ca_pem, cert, key = generate_certs()
            cert_file = os.path.join(self.tmpdir, 'tls.crt')
            key_file = os.path.join(self.tmpdir, 'tls.key')
            with open(cert_file, 'wb') as handle:
                handle.write(cert + self.ca_pem)
            with open(key_file, 'wb') as handle:
                handle.write(key)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert_file, key_file)
        for ns in self.namespaces:
            self.create_namespace(ns)
        self.controller.start()
        self.httpd = TLSSniffingServer((self.host, self.port), Handler, self.app, ctx)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={'poll_interval': 0.02}, name='kubeapi-http', daemon=True)
        self.thread.start()
        if self.kubeconfig_path is None:
            self.kubeconfig_path = os.path.join(self.tmpdir, 'kubeconfig')
        self.write_kubeconfig(self.kubeconfig_path)
        return self

    def stop(self):
        """Stop listener, watches and controllers."""
        self.app.stopping.set()
        with self.store.cond:
            self.store.cond.notify_all()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.close_all()
            self.httpd.server_close()
        self.controller.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # addresses -------------------------------------------------------------------------------------
    @property
    def url(self):
        """https:// URL (or http:// when tls=False)."""
        return '%s://%s:%d' % ('https' if self.tls else 'http', self.host, self.port)

    @property
    def http_url(self):
        """Plain HTTP URL on the same port."""
        return 'http://%s:%d' % (self.host, self.port)

    # helpers -----------------------------------------------------------------------------------------
    def create_namespace(self, name):
        """Create a namespace if missing."""
        nst = self.store.rtype('', 'namespaces')
        if self.store.peek(nst, '', name) is None:
            self.store.create(nst, '', {'metadata': {'name': name, 'labels': {'kubernetes.io/metadata.name': name}}})

    def add_token(self, token, namespaces, user=None):
        """Register a bearer token allowed on ``namespaces`` ('*' = all); returns it (the real stack's ``add_token`` returns
        the token its server minted instead: use the returned value)."""
        self.tokens[token] = {'user': user or token, 'namespaces': list(namespaces)}
        return token

    def kubeconfig(self, token=None, https=True, context='kubeapi-test'):
        """Kubeconfig dict for ``token`` (default admin)."""
        cluster = {'server': self.url if https else self.http_url}
        if https and self.tls:
            cluster['certificate-authority-data'] = base64.b64encode(self.ca_pem).decode()
        return {'apiVersion': 'v1', 'kind': 'Config', 'current-context': context, 'preferences': {},
                'clusters': [{'name': 'kubeapi-test', 'cluster': cluster}],
                'users': [{'name': 'kubeapi-user', 'user': {'token': token or self.admin_token}}],
                'contexts': [{'name': context, 'context': {'cluster': 'kubeapi-test', 'user': 'kubeapi-user', 'namespace': 'default'}}]}

    def write_kubeconfig(self, path, token=None, https=True):
        """Write a kubeconfig file; returns the path."""
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        with open(path, 'w', encoding='utf-8') as handle:
            yaml.safe_dump(self.kubeconfig(token, https), handle)
        return path

    def api_client(self, token=None, https=True):
        """A configured ``kubernetes.client.ApiClient`` (imports the kubernetes package lazily)."""
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
        path = os.path.join(self.tmpdir, 'kubeconfig-%s-%s' % (abs(hash(token or self.admin_token)), 'https' if https else 'http'))
        self.write_kubeconfig(path, token, https)
        cfg = client.Configuration()
        config.load_kube_config(config_file=path, client_configuration=cfg)
        return client.ApiClient(cfg)
