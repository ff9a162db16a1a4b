"""Benchmark: no-op re-runs over N KubeVirt VMs, converge.virt.vm vs kubevirt.core.kubevirt_vm, like with like.

Against the real Kubernetes stack of tools/kubelab (kube-apiserver, etcd, KubeVirt's virt-api with its webhooks and
CRDs; the KubeVirt controllers emulated: tests/kubeapi/real.py, paused once every VM settled) or, with ``--api
emulated``, the API emulator of tests/kubeapi. Each side's N VMs (``--state running``: runStrategy Always, a
containerDisk; ``stopped``: Halted) are created by **its own module**, in its own namespace, one task looping over the
names (the single-VM form, as each module's documentation shows): converge.virt.vm in ``default``,
kubevirt.core.kubevirt_vm in ``demo`` (``wait: false`` on its create run: its wait polls every ``wait_sleep`` = 5 s).
Then, ``--repeat`` (odd) rounds alternating in order (reversed every other round), each timed as a whole
``ansible-playbook`` process, wall and CPU (user + system of the process and its children):

* ``converge.virt.vm looped``: one task, ``loop`` over the N names, the same arguments as its create run;
* ``kubevirt.core.kubevirt_vm looped``: the same, with ``wait: true`` (what its documentation shows for a VM that
  must be up, or gone for Halted);
* ``converge.virt.vm fleet form``: one task declaring all N VMs (``vms``): its own line, **a different form** from the
  peer's loop, never the per-task comparison;
* the start-up floor: ``ansible localhost -m ping`` and a playbook of one ``ansible.builtin.ping`` task
  (bench.common.startup_floor).

Every converge.virt run must report no change; the number of items kubevirt.core reports changed is recorded. Medians
(the middle run: the count is odd), every run, and the 1-minute load average before every round are written to
bench/results/kubevirt_fleet[_stopped][_emulated].json, with ``comparisons`` (the lines tools/bench_summary.py prints):
looped vs looped (ratio converge / kubevirt.core, target <= 0.80) and the fleet form vs the peer's loop (labelled as
different forms).

    python -m tools.virtlab netns -- build/bench-venv/bin/python -m bench.kubevirt_fleet --vms 20 --repeat 5
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.common import (add_api_option, alternating, comparison, kube_api, odd_repeat, report,  # noqa: E402 pylint: disable=wrong-import-position
                          startup_floor)

BENCH_BIN = os.path.join(ROOT, 'build', 'bench-venv', 'bin')
IMAGE = 'quay.io/containerdisks/fedora:40'
OURS_NS = 'default'
PEER_NS = 'demo'


def env_for():
    """The playbooks' environment: this checkout as converge.virt, the bench venv's Python on the managed side, and no
    PYTHONDONTWRITEBYTECODE (kept only with BENCH_DONT_WRITE_BYTECODE=1): a user's shell does not set it, and with it
    converge.virt's module_utils bytecode cache is never filled (every task compiles its module_utils again, ~0.3 s of
    CPU here), while kubevirt.core's library keeps the bytecode pip wrote at install."""
    env = dict(os.environ)
    if os.environ.get('BENCH_DONT_WRITE_BYTECODE') != '1':
        env.pop('PYTHONDONTWRITEBYTECODE', None)
    env.update({
        'ANSIBLE_COLLECTIONS_PATH': os.path.join(ROOT, 'build', 'collections'),
        'ANSIBLE_PYTHON_INTERPRETER': os.path.join(BENCH_BIN, 'python'),
        'ANSIBLE_LOCALHOST_WARNING': '0', 'ANSIBLE_INVENTORY_UNPARSED_WARNING': '0', 'ANSIBLE_NOCOLOR': '1',
        'ANSIBLE_DEPRECATION_WARNINGS': '0',
    })
    env.pop('ANSIBLE_STDOUT_CALLBACK', None)
    return env


def run_playbook(tasks, expect_changed=None, env_extra=None):
    """One ansible-playbook run of ``tasks`` (``env_extra`` added to the environment): {'seconds', 'cpu_seconds',
    'changed_items'}; a failed run raises, and so does a change when ``expect_changed`` is False."""
    plays = [{'name': 'bench', 'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks}]
    with tempfile.NamedTemporaryFile('w', suffix='.yml', delete=False) as handle:
        json.dump(plays, handle)
        path = handle.name
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([os.path.join(BENCH_BIN, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local', path],
                              env=dict(env_for(), **(env_extra or {})), capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise RuntimeError('playbook failed:\n%s\n%s' % (proc.stdout[-4000:], proc.stderr[-2000:]))
    if expect_changed is False and 'changed=0' not in proc.stdout:
        raise RuntimeError('a no-op benchmark run reported a change:\n%s' % proc.stdout[-4000:])
    return {'seconds': elapsed, 'cpu_seconds': (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            'changed_items': proc.stdout.count('changed: [localhost]')}


def converge_vm(srv, state):
    """converge.virt.vm's arguments for one VM, less its name."""
    return {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': OURS_NS, 'wait_timeout': 600, 'vcpus': 1,
            'memory': '64Mi', 'disks': [{'name': 'root', 'image': IMAGE}], 'state': state}


def converge_looped(srv, names, state):
    return {'converge.virt.vm': dict(converge_vm(srv, state), name='{{ item }}'), 'loop': names}


def converge_fleet(srv, names, state):
    args = converge_vm(srv, state)
    args.update(parallel=8, vms=[{'name': n} for n in names])
    return {'converge.virt.vm': args}


def kubevirt_core_looped(srv, names, state, wait):
    spec = {'domain': {'cpu': {'cores': 1}, 'resources': {'requests': {'memory': '64Mi'}},
                       'devices': {'disks': [{'name': 'root', 'disk': {'bus': 'virtio'}}]}},
            'volumes': [{'name': 'root', 'containerDisk': {'image': IMAGE}}]}
    args = {'kubeconfig': srv.kubeconfig_path, 'namespace': PEER_NS, 'name': '{{ item }}',
            'run_strategy': 'Always' if state == 'running' else 'Halted', 'wait': wait, 'wait_timeout': 600, 'spec': spec}
    return {'kubevirt.core.kubevirt_vm': args, 'loop': names}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=50)
    parser.add_argument('--state', choices=('running', 'stopped'), default='running')
    parser.add_argument('--repeat', type=odd_repeat, default=5, help='alternating rounds, odd (the median is the middle run)')
    parser.add_argument('--collections', help='another collections path (e.g. an older commit\'s tree): its converge.virt.vm looped is '
                                              'timed too, on the same VMs (a before/after)')
    add_api_option(parser)
    args = parser.parse_args(argv)
    names = ['bench-%04d' % i for i in range(args.vms)]
    name = 'kubevirt_fleet' + ('' if args.state == 'running' else '_stopped') + ('' if args.api == 'real' else '_emulated')
    work = tempfile.mkdtemp(prefix='bench-kubevirt-')
    srv = kube_api(args.api, work)
    try:
        env = env_for()
        # each side's VMs made by its own module, the single-VM form looped (the emulated controllers run meanwhile)
        created = {'converge.virt.vm looped': run_playbook([converge_looped(srv, names, args.state)], expect_changed=True),
                   'kubevirt.core.kubevirt_vm looped (wait false)': run_playbook([kubevirt_core_looped(srv, names, args.state, False)],
                                                                                 expect_changed=True)}
        srv.controller.settle()
        srv.controller.pause()
        kinds = [
            ('converge.virt.vm looped', lambda: run_playbook([converge_looped(srv, names, args.state)], expect_changed=False)),
            ('kubevirt.core.kubevirt_vm looped', lambda: run_playbook([kubevirt_core_looped(srv, names, args.state, True)])),
            ('converge.virt.vm fleet form', lambda: run_playbook([converge_fleet(srv, names, args.state)], expect_changed=False)),
        ]
        if args.collections:
            other = {'ANSIBLE_COLLECTIONS_PATH': os.path.abspath(args.collections)}
            kinds.append(('converge.virt.vm looped (other tree)',
                          lambda: run_playbook([converge_looped(srv, names, args.state)], expect_changed=False, env_extra=other)))
        timed = alternating(kinds, args.repeat)
        floor = startup_floor(BENCH_BIN, env, args.repeat)
    finally:
        srv.stop()
        # the lab's state: its PKI and tokens included
        shutil.rmtree(work, ignore_errors=True)
    ours, peer, fleet = (timed[label] for label, _call in kinds[:3])
    ping_task = floor['playbook: one ping task']
    floor_line = {'label': 'playbook: one ping task', 'seconds': ping_task['median_seconds']}

    def side(label, entry, form):
        return {'label': label, 'form': form, 'seconds': entry['median_seconds'], 'cpu_seconds': entry['median_cpu_seconds']}

    result = {
        'vms': args.vms, 'state': args.state, 'api': args.api, 'repeat': args.repeat,
        'pythondontwritebytecode': bool(env.get('PYTHONDONTWRITEBYTECODE')),
        'controllers': 'emulated (tests/kubeapi/real.py), paused after every VM settled' if args.api == 'real' else 'API emulator',
        'created_by_own_module_s': dict((k, round(v['seconds'], 3)) for k, v in created.items()),
        'timed': timed, 'startup_floor': floor,
        'kubevirt_core_items_reported_changed_on_rerun': peer['changed_items'],
        'per_vm_over_floor_s': dict((label, round((timed[label]['median_seconds'] - ping_task['median_seconds']) / args.vms, 4))
                                    for label, _call in kinds),
        'comparisons': [
            comparison('KubeVirt no-op, %d %s VMs, looped' % (args.vms, args.state), side('converge.virt.vm', ours, 'looped'),
                       side('kubevirt.core.kubevirt_vm', peer, 'looped'), 'ours/peer', floor_line, note='target <= 0.80'),
            comparison('KubeVirt no-op, %d %s VMs, fleet form vs peer looped' % (args.vms, args.state),
                       side('converge.virt.vm', fleet, 'fleet'), side('kubevirt.core.kubevirt_vm', peer, 'looped'), 'ours/peer', floor_line,
                       note='different forms: the fleet form\'s gain, not a per-task figure'),
        ],
    }
    report(name, result)
    return 0


if __name__ == '__main__':
    sys.exit(main())
