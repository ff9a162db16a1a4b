"""Benchmark: ansible-inventory --list over a KubeVirt namespace with many VMs.

converge.virt.kubevirt vs kubevirt.core.kubevirt (from the ``ansible`` package
in build/bench-venv) vs an empty inventory, side by side against the same
Kubernetes API holding N VirtualMachines (a few running with a VMI; the
controller emulation is paused once settled): the real stack of tools/kubelab
(kube-apiserver, etcd, KubeVirt's virt-api and CRDs) by default, the API
emulator of tests/kubeapi with ``--api emulated``. ``--repeat`` rounds, round robin;
medians (and minima, every run, the load average) in
bench/results/inventory_kubevirt.json with the ratio.

``--floor`` adds ansible-core's own floor: a do-nothing plugin
(bench/inventory_floor.py) adding as many hosts with no variable, and with as
many variables of the same types as converge.virt.kubevirt sets by default.

    build/bench-venv/bin/python -m bench.inventory_kubevirt --vms 5000 --floor
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from bench.common import ROOT, add_api_option, kube_api, odd_repeat, report, results_name, venv_ansible_core
from bench.inventory_floor import side_by_side


def vm_body(name, running):
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {'name': name, 'labels': {'app': 'bench'}},
            'spec': {'runStrategy': 'Always' if running else 'Halted', 'template': {
                'metadata': {'labels': {'kubevirt.io/domain': name}},
                'spec': {
                    'domain': {'cpu': {'cores': 1}, 'resources': {'requests': {'memory': '64Mi'}},
                               'devices': {'disks': [{'name': 'root', 'disk': {'bus': 'virtio'}}]}},
                    'volumes': [{'name': 'root', 'containerDisk': {'image': 'quay.io/containerdisks/fedora:40'}}]}}}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=5000)
    parser.add_argument('--running', type=int, default=5)
    parser.add_argument('--repeat', type=odd_repeat, default=5, help='alternating rounds, odd (the median is the middle run)')
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--results-name', help='results file bench/results/<name>.json (default: inventory_kubevirt, or inventory_kubevirt_core<X.Y> '
                        'with a --venv other than build/bench-venv)')
    parser.add_argument('--floor', action='store_true', help='also time a do-nothing plugin adding as many hosts (0 and 12 variables)')
    add_api_option(parser)
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    name = results_name('inventory_kubevirt' + ('' if args.api == 'real' else '_emulated'), args.venv, args.results_name)
    work = tempfile.mkdtemp()
    srv = kube_api(args.api, work)
    try:
        from kubernetes import client as k8s  # pylint: disable=import-outside-toplevel
        api = k8s.CustomObjectsApi(srv.api_client())
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda index: api.create_namespaced_custom_object('kubevirt.io', 'v1', 'default', 'virtualmachines',
                                                                            vm_body('vm-%05d' % index, index < args.running)), range(args.vms)))
        create_seconds = time.perf_counter() - t0
        srv.controller.settle()
        srv.controller.pause()
        ours = os.path.join(work, 'bench.converge_kubevirt.yml')
        with open(ours, 'w', encoding='utf-8') as handle:
            json.dump({'plugin': 'converge.virt.kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespaces': ['default']}, handle)
        peer = os.path.join(work, 'bench.kubevirt.yml')
        with open(peer, 'w', encoding='utf-8') as handle:
            json.dump({'plugin': 'kubevirt.core.kubevirt', 'connections': [{'kubeconfig': srv.kubeconfig_path, 'namespaces': ['default']}]}, handle)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, 'build', 'collections'), ANSIBLE_NOCOLOR='1',
                   ANSIBLE_DEPRECATION_WARNINGS='0')
        results = {'vms': args.vms, 'api': args.api, 'running': args.running, 'create_seconds': round(create_seconds, 1), 'repeat': args.repeat,
                   'ansible_core': venv_ansible_core(args.venv)}
        # converge.virt.kubevirt's default host variables of a stopped VM: 7 strings, vcpus, and task_state, phase, message, node None
        results.update(side_by_side(bin_dir, env, work, args, ('converge.virt.kubevirt', ours, 'converge.virt.kubevirt'),
                                    ('kubevirt.core.kubevirt', peer, 'kubevirt.core.kubevirt'),
                                    ('floor: 12 variables like ours', 12, ['str'] * 7 + ['int'] + ['none'] * 4)))
        report(name, results)
    finally:
        srv.stop()
        # the lab's state, its PKI and tokens included
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
