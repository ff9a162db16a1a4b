"""Benchmark: converging a fleet of KubeVirt VMs (no-op), converge.virt.vm vs kubevirt.core.kubevirt_vm.

Against the real Kubernetes stack of tools/kubelab (kube-apiserver, etcd, KubeVirt's virt-api with its webhooks and
CRDs; the KubeVirt controllers emulated: tests/kubeapi/real.py) or, with ``--api emulated``, the API emulator of
tests/kubeapi; N running VMs per collection (each in its own namespace):

* converge.virt.vm, fleet form: one task declaring all N VMs (state running);
* kubevirt.core.kubevirt_vm (from the ``ansible`` package in build/bench-venv):
  one task looping over the N VMs (run_strategy Always, wait), as its
  documentation shows.

converge.virt first converges its VMs (creating and starting them through the
module), kubevirt.core's VMs are created directly in the server's store with
the manifest kubevirt.core builds (its own create run waits ``wait_sleep`` = 5 s
per VM, about 20 minutes for 200); after the emulated controllers settled them
(all Running) the controllers are paused and the timed runs start. The
converge.virt run must report no change; the number of items kubevirt.core
reports changed is recorded (0 on VMs made from its manifest; after its own
create run, a 5-VM trial reported every item changed on the re-run). Both run with the same ansible-playbook and Python
(build/bench-venv, which needs the ``kubernetes`` library). An empty playbook
is timed too, to show ansible's start-up. Results are printed as JSON and
written to bench/results/kubevirt_fleet.json with the ratio
kubevirt.core / converge.virt.

    python -m bench.kubevirt_fleet --vms 200
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.common import add_api_option, kube_api  # noqa: E402 pylint: disable=wrong-import-position

BENCH_BIN = os.path.join(ROOT, 'build', 'bench-venv', 'bin')
IMAGE = 'quay.io/containerdisks/fedora:40'


def env_for():
    env = dict(os.environ)
    env.update({
        'ANSIBLE_COLLECTIONS_PATH': os.path.join(ROOT, 'build', 'collections'),
        'ANSIBLE_PYTHON_INTERPRETER': os.path.join(BENCH_BIN, 'python'),
        'ANSIBLE_LOCALHOST_WARNING': '0', 'ANSIBLE_INVENTORY_UNPARSED_WARNING': '0', 'ANSIBLE_NOCOLOR': '1',
        'ANSIBLE_DEPRECATION_WARNINGS': '0',
    })
    return env


def run_playbook(tasks, expect_changed=None):
    plays = [{'name': 'bench', 'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks}]
    with tempfile.NamedTemporaryFile('w', suffix='.yml', delete=False) as handle:
        json.dump(plays, handle)
        path = handle.name
    try:
        start = time.perf_counter()
        proc = subprocess.run([os.path.join(BENCH_BIN, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local', path],
                              env=env_for(), capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise RuntimeError('playbook failed:\n%s\n%s' % (proc.stdout[-4000:], proc.stderr[-2000:]))
    if expect_changed is False and 'changed=0' not in proc.stdout:
        raise RuntimeError('a no-op benchmark run reported a change:\n%s' % proc.stdout[-4000:])
    CHANGED_ITEMS.append(proc.stdout.count('changed: [localhost]'))
    return elapsed


CHANGED_ITEMS = []


def converge_task(srv, names):
    return {'converge.virt.vm': {
        'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': 'default', 'parallel': 8, 'wait_timeout': 600,
        'vms': [{'name': n, 'vcpus': 1, 'memory': '64Mi', 'disks': [{'name': 'root', 'image': IMAGE}], 'state': 'running'} for n in names]}}


def kubevirt_core_task(srv, names):
    spec = {'domain': {'cpu': {'cores': 1}, 'resources': {'requests': {'memory': '64Mi'}},
                       'devices': {'disks': [{'name': 'root', 'disk': {'bus': 'virtio'}}]}},
            'volumes': [{'name': 'root', 'containerDisk': {'image': IMAGE}}]}
    args = {'kubeconfig': srv.kubeconfig_path, 'namespace': 'demo', 'name': '{{ item }}', 'run_strategy': 'Always', 'wait': True,
            'wait_timeout': 600, 'spec': spec}
    return {'kubevirt.core.kubevirt_vm': args, 'loop': names}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=200)
    parser.add_argument('--repeat', type=int, default=2, help='timed no-op runs per side (best is kept)')
    add_api_option(parser)
    args = parser.parse_args()
    names = ['bench-%04d' % i for i in range(args.vms)]
    srv = kube_api(args.api, tempfile.mkdtemp(prefix='bench-kubevirt-'))
    try:
        empty = min(run_playbook([{'ansible.builtin.meta': 'noop'}]) for _attempt in range(args.repeat))
        created = {'converge': run_playbook([converge_task(srv, names)])}
        t_vm = srv.store.rtype('kubevirt.io', 'virtualmachines')
        core_spec = kubevirt_core_task(srv, names)['kubevirt.core.kubevirt_vm']['spec']
        for name in names:
            srv.store.create(t_vm, 'demo', {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {'name': name, 'namespace': 'demo'},
                                            'spec': {'runStrategy': 'Always', 'template': {'spec': core_spec}}})
        srv.controller.settle()
        srv.controller.pause()
        converge = min(run_playbook([converge_task(srv, names)], expect_changed=False) for _attempt in range(args.repeat))
        # kubevirt.core's changed count is measured, not asserted
        core = min(run_playbook([kubevirt_core_task(srv, names)]) for _attempt in range(args.repeat))
        core_changed = CHANGED_ITEMS[-1]
    finally:
        srv.stop()
    result = {
        'vms': args.vms,
        'api': args.api,
        'empty_playbook_s': round(empty, 3),
        'first_run_s': dict((k, round(v, 3)) for k, v in created.items()),
        'noop_converge_fleet_s': round(converge, 3),
        'noop_kubevirt_core_loop_s': round(core, 3),
        'noop_converge_minus_startup_s': round(converge - empty, 3),
        'noop_kubevirt_core_minus_startup_s': round(core - empty, 3),
        'kubevirt_core_items_reported_changed_on_rerun': core_changed,
        'ratio_kubevirt_core_over_converge': round(core / converge, 2),
        'ratio_minus_startup': round((core - empty) / max(1e-6, converge - empty), 2),
    }
    print(json.dumps(result, indent=2))
    os.makedirs(os.path.join(ROOT, 'bench', 'results'), exist_ok=True)
    with open(os.path.join(ROOT, 'bench', 'results', 'kubevirt_fleet%s.json' % ('' if args.api == 'real' else '_emulated')), 'w',
              encoding='utf-8') as handle:
        json.dump(result, handle, indent=2)


if __name__ == '__main__':
    main()
