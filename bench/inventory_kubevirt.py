"""Benchmark: ansible-inventory --list over a KubeVirt namespace with many VMs.

converge.virt.kubevirt vs kubevirt.core.kubevirt (from the ``ansible`` package
in build/bench-venv) vs an empty inventory, side by side against the same
Kubernetes API test server (tests/kubeapi) holding N VirtualMachines (a few
running with a VMI). Best of ``--repeat`` runs; results in
bench/results/inventory_kubevirt.json with the ratio.

    build/bench-venv/bin/python -m bench.inventory_kubevirt --vms 5000
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.common import ROOT, report
from tests.kubeapi import KubeTestServer


def vm_body(name, running):
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {'name': name, 'labels': {'app': 'bench'}},
            'spec': {'runStrategy': 'Always' if running else 'Halted', 'template': {
                'metadata': {'labels': {'kubevirt.io/domain': name}},
                'spec': {
                    'domain': {'cpu': {'cores': 1}, 'resources': {'requests': {'memory': '64Mi'}},
                               'devices': {'disks': [{'name': 'root', 'disk': {'bus': 'virtio'}}]}},
                    'volumes': [{'name': 'root', 'containerDisk': {'image': 'quay.io/containerdisks/fedora:40'}}]}}}}


def timed(bin_dir, path, enabled):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, 'build', 'collections'), ANSIBLE_INVENTORY_ENABLED=enabled,
               ANSIBLE_NOCOLOR='1', ANSIBLE_DEPRECATION_WARNINGS='0')
    start = time.perf_counter()
    proc = subprocess.run([os.path.join(bin_dir, 'ansible-inventory'), '-i', path, '--list'], env=env, capture_output=True, text=True,
                          check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return elapsed, len(json.loads(proc.stdout).get('_meta', {}).get('hostvars', {}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=5000)
    parser.add_argument('--running', type=int, default=5)
    parser.add_argument('--repeat', type=int, default=2)
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    work = tempfile.mkdtemp()
    srv = KubeTestServer(kubeconfig_path=os.path.join(work, 'kubeconfig')).start()
    try:
        from kubernetes import client as k8s  # pylint: disable=import-outside-toplevel
        api = k8s.CustomObjectsApi(srv.api_client())
        t0 = time.perf_counter()
        for index in range(args.vms):
            api.create_namespaced_custom_object('kubevirt.io', 'v1', 'default', 'virtualmachines', vm_body('vm-%05d' % index, index < args.running))
        create_seconds = time.perf_counter() - t0
        srv.controller.settle()
        ours = os.path.join(work, 'bench.converge_kubevirt.yml')
        with open(ours, 'w', encoding='utf-8') as handle:
            json.dump({'plugin': 'converge.virt.kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespaces': ['default']}, handle)
        peer = os.path.join(work, 'bench.kubevirt.yml')
        with open(peer, 'w', encoding='utf-8') as handle:
            json.dump({'plugin': 'kubevirt.core.kubevirt', 'connections': [{'kubeconfig': srv.kubeconfig_path, 'namespaces': ['default']}]}, handle)
        empty = os.path.join(work, 'empty.yml')
        with open(empty, 'w', encoding='utf-8') as handle:
            json.dump({'all': {'hosts': {}}}, handle)
        results = {'vms': args.vms, 'running': args.running, 'create_seconds': round(create_seconds, 1)}
        for label, path, enabled in (('empty', empty, 'yaml'), ('converge.virt.kubevirt', ours, 'converge.virt.kubevirt'),
                                     ('kubevirt.core.kubevirt', peer, 'kubevirt.core.kubevirt')):
            runs = [timed(bin_dir, path, enabled) for _attempt in range(args.repeat)]
            results[label] = {'seconds': round(min(r[0] for r in runs), 3), 'hosts': runs[0][1]}
        results['ratio_kubevirt_core_vs_converge'] = round(results['kubevirt.core.kubevirt']['seconds'] / results['converge.virt.kubevirt']['seconds'], 1)
        report('inventory_kubevirt', results)
    finally:
        srv.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
