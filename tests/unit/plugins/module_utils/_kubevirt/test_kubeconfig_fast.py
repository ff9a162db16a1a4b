# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubeconfig fast path (_kubevirt/kubeconfig.py) reads what kubernetes.config.load_kube_config reads, sends the
same headers, hands everything else to the library, and never imports the library itself."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys

import pytest

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kclient
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import kubeconfig as fast

CA_PEM = None


def pem_pair(tmp_path):
    """A self-signed certificate and its key (openssl), PEM bytes."""
    key, cert = tmp_path / 'k.pem', tmp_path / 'c.pem'
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', str(key), '-out', str(cert), '-days', '1',
                    '-subj', '/CN=kubeconfig-test'], check=True, capture_output=True)
    return cert.read_bytes(), key.read_bytes()


def write_config(tmp_path, cluster, user, name='kc.json', current='main', extra_contexts=()):
    contexts = [{'name': 'main', 'context': {'cluster': 'c1', 'user': 'u1'}}] + list(extra_contexts)
    config = {'apiVersion': 'v1', 'kind': 'Config', 'current-context': current, 'contexts': contexts,
              'clusters': [{'name': 'c1', 'cluster': cluster}, {'name': 'c2', 'cluster': {'server': 'https://10.0.0.2:6443'}}],
              'users': [{'name': 'u1', 'user': user}, {'name': 'u2', 'user': {'token': 'second-token'}}]}
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def library_config(path, context=None):
    from kubernetes import client, config  # pylint: disable=import-outside-toplevel
    cfg = client.Configuration()
    config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    return cfg


def library_authorization(cfg):
    key = (cfg.api_key or {}).get('authorization') or (cfg.api_key or {}).get('BearerToken')
    if key:
        return key
    if cfg.username and cfg.password:
        return cfg.get_basic_auth_token()
    return None


def read(path):
    with open(path, 'rb') as handle:
        return handle.read()


def test_token_and_relative_ca_file_read_as_the_library_reads_them(tmp_path):
    (tmp_path / 'ca.crt').write_bytes(b'not read here')
    path = write_config(tmp_path, {'server': 'https://127.0.0.1:6443/', 'certificate-authority': 'ca.crt'}, {'token': 'tok-123'})
    ours, theirs = fast.load(path), library_config(path)
    assert ours.host == theirs.host == 'https://127.0.0.1:6443'
    assert ours.ssl_ca_cert == theirs.ssl_ca_cert == str(tmp_path / 'ca.crt')
    assert ours.authorization == library_authorization(theirs) == 'Bearer tok-123'
    assert ours.verify_ssl is theirs.verify_ssl is True


def test_embedded_ca_and_client_certificate_data(tmp_path):
    cert, key = pem_pair(tmp_path)
    path = write_config(tmp_path, {'server': 'https://127.0.0.1:6443', 'certificate-authority-data': base64.b64encode(cert).decode()},
                        {'client-certificate-data': base64.b64encode(cert).decode(), 'client-key-data': base64.b64encode(key).decode()})
    ours, theirs = fast.load(path), library_config(path)
    assert ours.ca_data.encode() == read(theirs.ssl_ca_cert) == cert
    assert ours.cert_data == read(theirs.cert_file) == cert
    assert ours.key_data == read(theirs.key_file) == key
    assert ours.authorization is None and library_authorization(theirs) is None
    # the TLS context loads them (a wrong key would raise here), and leaves no key material behind
    before = set(os.listdir(tmp_path.parent))
    context = fast._ssl_context(ours)  # pylint: disable=protected-access
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert set(os.listdir(tmp_path.parent)) == before


def test_insecure_skip_verify_basic_auth_and_plain_http(tmp_path):
    path = write_config(tmp_path, {'server': 'https://127.0.0.1:6443', 'insecure-skip-tls-verify': True}, {'username': 'ada', 'password': 'pw-9'})
    ours, theirs = fast.load(path), library_config(path)
    assert ours.verify_ssl is theirs.verify_ssl is False
    assert ours.authorization == library_authorization(theirs)
    assert fast._ssl_context(ours).verify_mode == ssl.CERT_NONE  # pylint: disable=protected-access
    path = write_config(tmp_path, {'server': 'http://127.0.0.1:8080'}, {'token': 'tok-http'}, name='http.json')
    ours, theirs = fast.load(path), library_config(path)
    assert ours.host == theirs.host and ours.ssl_ca_cert is None and ours.authorization == library_authorization(theirs)


def test_a_configuration_shows_where_it_connects_but_no_credential(tmp_path):
    key = b'-----BEGIN PRIVATE KEY-----\nkey-material-77\n-----END PRIVATE KEY-----\n'
    path = write_config(tmp_path, {'server': 'https://127.0.0.1:6443', 'insecure-skip-tls-verify': True},
                        {'token': 'tok-secret-5', 'client-certificate': 'c.pem', 'client-key-data': base64.b64encode(key).decode()})
    basic = write_config(tmp_path, {'server': 'https://127.0.0.1:6443'}, {'username': 'ada', 'password': 'pw-secret-9'}, name='basic.json')
    token, password = fast.load(path), fast.load(basic)
    assert token.key_data == key and token.authorization == 'Bearer tok-secret-5' and password.authorization.startswith('Basic ')
    for cfg, secrets in ((token, ('tok-secret-5', 'key-material-77')), (password, ('pw-secret-9', password.authorization[6:]))):
        shown = repr(cfg)
        assert "host='https://127.0.0.1:6443'" in shown and 'verify_ssl=' in shown
        assert not [secret for secret in secrets if secret in shown], shown
    assert "cert_file='%s'" % (tmp_path / 'c.pem') in repr(token)


def test_a_chosen_context_and_a_context_without_user(tmp_path):
    extra = [{'name': 'other', 'context': {'cluster': 'c2', 'user': 'u2'}}, {'name': 'anon', 'context': {'cluster': 'c2'}}]
    path = write_config(tmp_path, {'server': 'https://127.0.0.1:6443'}, {'token': 't'}, extra_contexts=extra)
    ours, theirs = fast.load(path, context='other'), library_config(path, context='other')
    assert ours.host == theirs.host == 'https://10.0.0.2:6443' and ours.authorization == library_authorization(theirs) == 'Bearer second-token'
    ours, theirs = fast.load(path, context='anon'), library_config(path, context='anon')
    assert ours.host == theirs.host and ours.authorization is None and library_authorization(theirs) is None


@pytest.mark.parametrize('cluster, user', [
    ({'server': 'https://h:6443'}, {'exec': {'apiVersion': 'client.authentication.k8s.io/v1', 'command': 'get-token'}}),
    ({'server': 'https://h:6443'}, {'auth-provider': {'name': 'oidc', 'config': {}}}),
    ({'server': 'https://h:6443'}, {'tokenFile': '/var/run/token'}),
    ({'server': 'https://h:6443', 'tls-server-name': 'api'}, {'token': 't'}),
    ({'server': 'https://h:6443', 'proxy-url': 'http://proxy:3128'}, {'token': 't'}),
    ({'certificate-authority': 'ca.crt'}, {'token': 't'}),
    ({'server': 'https://h:6443', 'insecure-skip-tls-verify': 'yes'}, {'token': 't'}),
])
def test_what_the_library_must_read_is_left_to_it(tmp_path, cluster, user):
    assert fast.load(write_config(tmp_path, cluster, user)) is None


def test_missing_files_contexts_and_merged_kubeconfigs_are_left_to_the_library(tmp_path):
    path = write_config(tmp_path, {'server': 'https://h:6443'}, {'token': 't'})
    assert fast.load(path, context='nope') is None
    assert fast.load(str(tmp_path / 'absent.yaml')) is None
    assert fast.load(None, environ={'KUBECONFIG': path + os.pathsep + path}) is None
    assert fast.load(None, environ={'KUBECONFIG': path}).host == 'https://h:6443'
    (tmp_path / 'bad.yaml').write_text('- a list\n')
    assert fast.load(str(tmp_path / 'bad.yaml')) is None


def library_client(monkeypatch, **kwargs):
    with monkeypatch.context() as patch:
        patch.setattr(kclient.kubeconfig_fast, 'for_options', lambda *a, **k: None)
        client = kclient.KubeClient(**kwargs)
    assert client.fast is None and client.api_client is not None
    return client


def test_the_client_sends_what_the_library_path_sends(tmp_path, monkeypatch):
    (tmp_path / 'ca.crt').write_bytes(pem_pair(tmp_path)[0])
    path = write_config(tmp_path, {'server': 'https://127.0.0.1:6443', 'certificate-authority': 'ca.crt'}, {'token': 'kc-token'})
    for options in ({'kubeconfig': path}, {'kubeconfig': path, 'api_key': 'opt-token', 'validate_certs': False},
                    {'kubeconfig': path, 'host': 'https://127.0.0.2:7443/', 'ca_cert': str(tmp_path / 'ca.crt')}):
        ours, theirs = kclient.KubeClient(**options), library_client(monkeypatch, **options)
        assert ours.fast is not None and ours.transport is not None
        assert ours.host == theirs.host
        assert ours._headers('application/json') == theirs._headers('application/json')  # pylint: disable=protected-access
        assert ours.config.verify_ssl == theirs.config.verify_ssl
        assert set(ours.secrets) >= set(theirs.secrets)
        used = options.get('api_key') or 'kc-token'
        assert used not in ours.redact('a %s b' % used) and used not in theirs.redact('a %s b' % used)
    # host alone (no kubeconfig read): the library's defaults
    ours, theirs = kclient.KubeClient(host='http://127.0.0.1:8080', api_key='k'), library_client(monkeypatch, host='http://127.0.0.1:8080', api_key='k')
    assert ours.host == theirs.host and ours._headers() == theirs._headers()  # pylint: disable=protected-access
    assert ours.warnings == theirs.warnings and 'plain http://' in ours.warnings[0]


def test_a_module_process_on_the_fast_path_never_imports_kubernetes(tmp_path):
    token_config = write_config(tmp_path, {'server': 'https://127.0.0.1:6443'}, {'token': 't'}, name='token.json')
    exec_config = write_config(tmp_path, {'server': 'https://127.0.0.1:6443'}, {'exec': {'command': 'x', 'apiVersion': 'client.authentication.k8s.io/v1'}},
                               name='exec.json')
    code = ('import sys\n'
            'from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client\n'
            'assert client.kubernetes_available()\n'
            'c = client.KubeClient(kubeconfig=sys.argv[1])\n'
            'print(c.fast is not None, "kubernetes" in sys.modules)\n')
    # the directory holding ansible_collections/ (pytest's and ansible-test's layouts differ), first on the child's path
    root = os.path.abspath(kclient.__file__)
    for _level in range(7):
        root = os.path.dirname(root)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    answers = []
    for path in (token_config, exec_config):
        proc = subprocess.run([sys.executable, '-c', code, path], capture_output=True, text=True, check=False, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        answers.append(proc.stdout.split())
    assert answers == [['True', 'False'], ['False', 'True']]
