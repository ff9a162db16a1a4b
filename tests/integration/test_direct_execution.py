"""Direct execution (issue 39): the same playbook with and without converge_virt_direct_execution gives the same results.

One playbook on a private libvirt host - create, no-op, check mode with diff, a refused transition, a no_log password on a
working task and a password inside a URI that cannot connect, ``environment:`` (LIBVIRT_DEFAULT_URI instead of ``uri``),
module_defaults, a task delegated to localhost, a volume in check mode with and without diff (that module returns its
diff only when asked) - is run twice: once as usual (every task a module process fed an AnsiballZ payload) and once with
the variable true, each on its own VM. The results must agree task for task, whole (changed, failed, msg, diff, every
returned value, the invocation), with only the VM's own name and UUID set aside, and where the code ran from (the file
paths of a traceback: the payload's zip or the installed collection). The direct run must leave no AnsiballZ payload
behind with ANSIBLE_KEEP_REMOTE_FILES=1 (the usual run leaves one per task: the check can see them) and, at -vvv, say
for each task that it ran in the worker; the password must appear in no output of either run (stdout and stderr of
ansible-playbook at -vvv). The same comparison for backend kubevirt on the API emulator of tests/kubeapi (create, no-op,
check mode with diff, vm_info, remove). Run on ansible-core 2.16, 2.17, 2.18 and 2.19 (2026-11-29, each 5 passed; the
kubevirt comparison 10 times more on 2.19 once printableStatus was set aside, see KUBEVIRT_VOLATILE).
"""

import glob
import json
import os
import re
import tempfile

import pytest
import yaml

from tests.integration.ansible_run import BIN, ansible_env, run_cli
from tests.kubeapi.fixtures import kube_emulator  # noqa: F401  # pylint: disable=unused-import  # a pytest fixture
from tools.virtlab import hosts as virtlab_hosts

SECRET = 'Direct-Exec-Canary-41d7'
# what differs between two VMs made from one definition (each run has its own VM)
VOLATILE = frozenset(['uuid'])
# where the code ran from, in a traceback (ansible-core < 2.19 returns one with fail_json): the payload's zip or the collection
CODE_PATH = re.compile(r'File "[^"]*?/ansible_collections/')


def play(host, name, tmp):
    """The playbook: every task names its purpose; failures are expected where a task says ignore_errors."""
    vm = {'uri': host.uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(),
          'shutdown_timeout': 1}
    volume = {'uri': host.uri, 'pool': name + '-pool', 'pool_path': os.path.join(tmp, name + '-pool'), 'name': 'v.raw',
              'capacity': '1MiB'}
    bad_uri = 'qemu+tcp://someone:%s@%s:1/system' % (SECRET, host.address)  # nothing listens on port 1
    tasks = [
        {'name': 'create', 'converge.virt.vm': dict(vm, state='stopped')},
        {'name': 'no-op', 'converge.virt.vm': dict(vm, state='stopped')},
        {'name': 'check with diff', 'converge.virt.vm': dict(vm, state='running'), 'check_mode': True, 'diff': True},
        {'name': 'refused', 'converge.virt.vm': dict(vm, state='paused'), 'ignore_errors': True},
        {'name': 'no_log password', 'converge.virt.vm': dict(vm, state='stopped', password=SECRET)},
        {'name': 'password in a URI', 'converge.virt.vm_info': {'uri': bad_uri, 'name': name}, 'ignore_errors': True},
        {'name': 'environment', 'converge.virt.vm_info': {'name': name}, 'environment': {'LIBVIRT_DEFAULT_URI': host.uri}},
        {'name': 'module_defaults', 'converge.virt.vm_info': {'name': name}},
        {'name': 'delegated', 'converge.virt.vm': dict(vm, state='stopped'), 'delegate_to': 'localhost'},
        {'name': 'update in check mode', 'converge.virt.vm': dict(vm, state='stopped', memory='80MiB'), 'check_mode': True,
         'diff': True},
        {'name': 'remove', 'converge.virt.vm': dict(vm, state='absent')},
        # the volume module returns its diff only when asked (module._diff): check mode creates neither pool nor volume
        {'name': 'volume check with diff', 'converge.virt.volume': volume, 'check_mode': True, 'diff': True},
        {'name': 'volume check without diff', 'converge.virt.volume': volume, 'check_mode': True},
    ]
    # module_defaults for the one task without uri nor environment; the environment task's own wins over nothing
    defaults = {'group/converge.virt.libvirt': {'uri': host.uri}}
    return [{'name': 'direct execution', 'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks[:7]},
            {'name': 'with defaults', 'hosts': 'localhost', 'gather_facts': False, 'module_defaults': defaults, 'tasks': tasks[7:]}]


def kubevirt_play(srv, name):
    """The KubeVirt playbook (the API emulator of tests/kubeapi): create, no-op, check mode with diff, vm_info, remove."""
    vm = {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': 'default', 'wait_timeout': 60, 'name': name,
          'vcpus': 1, 'memory': '64Mi', 'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}]}
    tasks = [
        {'name': 'create', 'converge.virt.vm': dict(vm, state='stopped')},
        {'name': 'no-op', 'converge.virt.vm': dict(vm, state='stopped')},
        {'name': 'check with diff', 'converge.virt.vm': dict(vm, state='running'), 'check_mode': True, 'diff': True},
        {'name': 'info', 'converge.virt.vm_info': {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path,
                                                   'namespace': 'default', 'name': name}},
        {'name': 'remove', 'converge.virt.vm': dict(vm, state='absent')},
    ]
    return [{'name': 'kubevirt', 'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks}]


def differences(left, right, path=''):
    """The paths at which two results differ (for a failure's message)."""
    if isinstance(left, dict) and isinstance(right, dict):
        return [found for key in sorted(set(left) | set(right), key=str)
                for found in differences(left.get(key), right.get(key), '%s/%s' % (path, key))]
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [found for index, pair in enumerate(zip(left, right)) for found in differences(pair[0], pair[1], '%s/%d' % (path, index))]
    return [] if left == right else ['%s: %r != %r' % (path, left, right)]


def normalized(value, name, volatile=VOLATILE):
    """``value`` with the VM's own name as VM and what differs between two VMs of one definition set aside."""
    if isinstance(value, dict):
        return dict((normalized(key, name, volatile), normalized(item, name, volatile)) for key, item in value.items()
                    if key not in volatile)
    if isinstance(value, list):
        return [normalized(item, name, volatile) for item in value]
    if isinstance(value, str):
        return CODE_PATH.sub('File "ansible_collections/', value.replace(name, 'VM'))
    return value


def run(plays, name, direct, tmp):
    """(rc, results by task name across the plays, stdout + stderr, kept payload paths) of one run of the playbook at -vvv.

    The results come from the json callback (tests/integration/callback_plugins/results_json.py): its one line at the end,
    after the display's -vvv lines.
    """
    path = os.path.join(tmp, 'play-%s.yml' % name)
    with open(path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump(plays, handle)
    remote = os.path.join(tmp, 'remote-%s' % name)
    os.makedirs(remote)
    env = {'ANSIBLE_KEEP_REMOTE_FILES': '1', 'ANSIBLE_REMOTE_TMP': remote, 'ANSIBLE_PIPELINING': '0'}
    cmd = [os.path.join(BIN, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local', '-vvv', path]
    if direct:
        cmd += ['-e', json.dumps({'converge_virt_direct_execution': True})]
    rc, stdout, stderr = run_cli('ansible-playbook', cmd, ansible_env(env), 900)
    lines = [line for line in stdout.splitlines() if line.startswith('{"plays"')]
    assert lines, (rc, stdout[-3000:], stderr[-3000:])
    document = json.loads(lines[-1])
    results = {}
    for one in document['plays']:
        results.update(dict((task['task']['name'], task['hosts']['localhost']) for task in one['tasks']))
    payloads = glob.glob(os.path.join(remote, '**', 'AnsiballZ_*'), recursive=True)
    return rc, results, stdout + stderr, payloads


@pytest.fixture(scope='module')
def both(host):
    with tempfile.TemporaryDirectory(prefix='direct-exec-') as tmp:
        usual = run(play(host, 'de-usual', tmp), 'de-usual', False, tmp)
        direct = run(play(host, 'de-direct', tmp), 'de-direct', True, tmp)
        yield usual, direct


EXPECTED = {
    'create': dict(changed=True), 'no-op': dict(changed=False), 'check with diff': dict(changed=True),
    'refused': dict(failed=True), 'no_log password': dict(changed=False), 'password in a URI': dict(failed=True),
    'environment': dict(changed=False), 'module_defaults': dict(changed=False), 'delegated': dict(changed=False),
    'update in check mode': dict(changed=True), 'remove': dict(changed=True), 'volume check with diff': dict(changed=True),
    'volume check without diff': dict(changed=True),
}


def test_the_playbook_did_what_it_names(both):
    for rc, results, _out, _payloads in both:
        assert rc == 0 and sorted(results) == sorted(EXPECTED)
        for task, expected in EXPECTED.items():
            for key, value in expected.items():
                assert bool(results[task].get(key)) is value, (task, key, results[task])
        assert 'vm_state is STOPPED' in results['refused']['msg']
        assert results['check with diff']['diff']['before']['power_state'] != results['check with diff']['diff']['after']['power_state']
        assert 'diff' in results['volume check with diff'] and 'diff' not in results['volume check without diff']
        for task in ('environment', 'module_defaults'):
            assert results[task]['vms'][0]['exists'] is True, (task, results[task])


def test_the_same_results_with_and_without_direct_execution(both):
    (_rc, usual, _o, _p), (_rc2, direct, _o2, _p2) = both
    for task in EXPECTED:
        left, right = normalized(direct[task], 'de-direct'), normalized(usual[task], 'de-usual')
        assert left == right, (task, differences(left, right))


def test_no_module_process_ran_in_direct_mode(both):
    (_rc, _usual, usual_out, usual_payloads), (_rc2, _direct, direct_out, direct_payloads) = both
    # the usual run leaves one payload per converge.virt task (the check can see them); the direct run none
    assert len(usual_payloads) == len(EXPECTED) and all(os.path.basename(p).startswith(('AnsiballZ_vm', 'AnsiballZ_volume')) for p in usual_payloads)
    assert direct_payloads == []
    assert direct_out.count('converge.virt direct execution: running') == len(EXPECTED)
    assert 'converge.virt direct execution' not in usual_out and 'not used for' not in direct_out


def test_the_password_appears_nowhere(both):
    for _rc, results, out, _payloads in both:
        assert SECRET not in out
        assert results['no_log password']['invocation']['module_args']['password'] == 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'
        assert results['password in a URI']['failed'] and SECRET not in results['password in a URI']['msg']


# what the API server gives each object of its own (uid), and what KubeVirt's controller (here the emulator's) writes a
# moment after a create: a create's result reads printableStatus before or after it, whichever way the module runs
KUBEVIRT_VOLATILE = VOLATILE | frozenset(['uid', 'printable_status'])
KUBEVIRT_EXPECTED = {'create': True, 'no-op': False, 'check with diff': True, 'info': False, 'remove': True}


def test_kubevirt_the_same_results_with_and_without_direct_execution(kube_emulator, tmp_path):
    runs = [run(kubevirt_play(kube_emulator, name), name, direct, str(tmp_path)) for name, direct in (('kv-usual', False), ('kv-direct', True))]
    (rc, usual, _out, payloads), (rc2, direct, direct_out, direct_payloads) = runs
    assert rc == 0 and rc2 == 0
    assert dict((task, bool(result.get('changed'))) for task, result in usual.items()) == KUBEVIRT_EXPECTED
    assert [vm['name'] for vm in usual['info']['vms']] == ['kv-usual'] and 'diff' in usual['check with diff']
    for task in KUBEVIRT_EXPECTED:
        left, right = normalized(direct[task], 'kv-direct', KUBEVIRT_VOLATILE), normalized(usual[task], 'kv-usual', KUBEVIRT_VOLATILE)
        assert left == right, (task, differences(left, right))
    assert len(payloads) == len(KUBEVIRT_EXPECTED) and direct_payloads == []
    assert direct_out.count('converge.virt direct execution: running') == len(KUBEVIRT_EXPECTED)
