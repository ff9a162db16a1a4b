"""Command line entry point (python -m tests.kubeapi) and the session scoped fixture."""

# pylint: disable=missing-function-docstring,redefined-outer-name,consider-using-f-string

import json
import os
import signal
import subprocess
import sys
import time

from kubernetes import client, config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_cli_serves_until_sigterm(tmp_path):
    kubeconfig = tmp_path / 'kube' / 'kubeconfig'
    proc = subprocess.Popen([sys.executable, '-m', 'tests.kubeapi', '--port', '0', '--kubeconfig', str(kubeconfig)],  # pylint: disable=consider-using-with
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert info['url'].startswith('https://127.0.0.1:') and info['kubeconfig'] == str(kubeconfig)
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            assert {n.metadata.name for n in client.CoreV1Api(api).list_node().items} == {'node01', 'node02', 'node03'}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_session_server_and_throughput(kube_server_session):
    api = kube_server_session.api_client()
    v1 = client.CoreV1Api(api)
    v1.create_namespace({'metadata': {'name': 'session-ns'}})
    for i in range(5):
        v1.create_namespaced_config_map('session-ns', {'metadata': {'name': 'c%d' % i}})
    count, began = 0, time.time()
    while time.time() - began < 1.0:
        assert len(v1.list_namespaced_config_map('session-ns').items) == 5
        count += 1
    print('LIST requests/second (HTTPS, keep-alive, kubernetes client): %d' % count)
    assert count > 20
    v1.delete_namespace('session-ns')
    api.close()
