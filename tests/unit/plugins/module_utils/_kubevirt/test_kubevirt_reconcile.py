"""Reconcile on KubeVirt, the pure parts: the power KubeVirt carries out, the record drift the vm backend's converge
records first, stale-task recovery and recording in the annotations (with a fake client), and the reconcile module's
reading of a VM, its examine() on it, and the refusal of options of the other backend."""

# pylint: disable=missing-function-docstring,too-few-public-methods

import copy
import os
import socket
import time

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import TaskConflict
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend as vb
from ansible_collections.converge.virt.plugins.modules import reconcile as module

PARAMS = {'restart_stopped_guests': False, 'accept_running_guests': False}


def vm_object(strategy, annotations=None):
    return {'metadata': {'name': 'a', 'namespace': 'ns', 'uid': 'vm-uid', 'resourceVersion': '1', 'generation': 1,
                         'annotations': dict(annotations or {})},
            'spec': {'runStrategy': strategy, 'template': {'spec': {'domain': {}}}}, 'status': {}}


def vmi_object(phase='Running', deleting=False):
    meta = {'name': 'a', 'uid': 'vmi-uid', 'ownerReferences': [{'uid': 'vm-uid'}]}
    if deleting:
        meta['deletionTimestamp'] = '2026-01-01T00:00:00Z'
    return {'metadata': meta, 'status': {'phase': phase}}


def observed(strategy, vmi=None, **annotations):
    record = dict(('converge.virt/' + key.replace('_', '-'), value) for key, value in annotations.items())
    return kobserve.build('a', 'ns', vm_object(strategy, record), vmi, [], [])


@pytest.mark.parametrize('strategy, vmi, power', [
    ('Always', vmi_object(), 'RUNNING'),
    ('Always', None, 'RUNNING'),                        # the instance was deleted: KubeVirt starts a new one
    ('Always', vmi_object('Pending'), 'RUNNING'),       # being started
    ('Halted', vmi_object(), 'SHUTDOWN'),               # being stopped (runStrategy changed to Halted)
    ('Halted', None, 'SHUTDOWN'),
    ('Manual', None, 'SHUTDOWN'),                       # nobody starts it again
    ('Manual', vmi_object(deleting=True), 'SHUTDOWN'),
    ('Manual', vmi_object(), 'RUNNING'),
])
def test_intended_power(strategy, vmi, power):
    assert vb.intended_power(observed(strategy, vmi)) == power


def test_intended_power_of_a_missing_vm_is_its_power_state():
    assert vb.intended_power(kobserve.absent('a', 'ns')) == kobserve.absent('a', 'ns')['power_state']


def test_recorded_drift():
    assert vb.recorded_drift(observed('Halted', None, vm_state='ACTIVE')) == ('ACTIVE', 'STOPPED')
    assert vb.recorded_drift(observed('Always', vmi_object(), vm_state='STOPPED')) == ('STOPPED', 'ACTIVE')
    assert vb.recorded_drift(observed('Always', vmi_object(), vm_state='ACTIVE')) is None
    assert vb.recorded_drift(observed('Halted', None)) is None                       # never recorded: nothing to correct
    assert vb.recorded_drift(observed('Halted', None, vm_state='ACTIVE', task_state='STOPPING')) is None   # a task in flight
    assert vb.recorded_drift(observed('Halted', None, vm_state='ERROR')) is None     # sticky
    assert vb.recorded_drift(kobserve.absent('a', 'ns')) is None


class FakeClient:
    """One VirtualMachine; merge patches of the annotations with a resourceVersion check."""

    def __init__(self, vm):
        self.vm = vm
        self.patches = 0

    def get(self, *args):
        del args
        return copy.deepcopy(self.vm)

    def merge_patch(self, api, namespace, plural, name, patch, dry_run=False):
        del api, namespace, plural, name, dry_run
        assert patch['metadata']['resourceVersion'] == self.vm['metadata']['resourceVersion']
        for key, value in patch['metadata']['annotations'].items():
            if value is None:
                self.vm['metadata']['annotations'].pop(key, None)
            else:
                self.vm['metadata']['annotations'][key] = value
        self.vm['metadata']['resourceVersion'] = str(int(self.vm['metadata']['resourceVersion']) + 1)
        self.patches += 1
        return self.vm


def _task(task_state, lease_until, owner):
    return {'converge.virt/vm-state': 'ACTIVE', 'converge.virt/task-state': task_state, 'converge.virt/task-id': 'old',
            'converge.virt/task-action': 'stop', 'converge.virt/lease-until': repr(lease_until), 'converge.virt/task-owner': owner}


def _kvm(strategy, vmi, annotations):
    client = FakeClient(vm_object(strategy, annotations))
    vm = vb.KubevirtVm(client, 'ns', 'a')
    return client, vm, kobserve.build('a', 'ns', client.get(), vmi, [], [])


@pytest.mark.parametrize('lease_delta, owner_pid, recovered', [
    (-5, 'self', True),             # lease over
    (3600, 999999, True),           # lease ahead, but the owner process on this host is gone
    (3600, 'self', False),          # a live run: left alone
])
def test_recover_stale(lease_delta, owner_pid, recovered):
    # 'self' (not os.getpid() in the parameters): xdist workers must collect the same test ids
    owner = '%s:%d' % (socket.gethostname(), os.getpid() if owner_pid == 'self' else owner_pid)
    client, vm, obs = _kvm('Halted', None, _task('STOPPING', time.time() + lease_delta, owner))
    note = vm.recover_stale(obs, time.time())
    annotations = client.vm['metadata']['annotations']
    if recovered:
        reason = note.pop('reason')
        assert reason.startswith('the lease ran out') if lease_delta < 0 else reason == 'the run that held it (%s) is gone' % owner
        assert note == {'recovered_task': 'STOPPING', 'recovered_task_id': 'old', 'recovery': 'redo', 'vm_state': 'STOPPED'}
        assert annotations == {'converge.virt/vm-state': 'STOPPED'}
    else:
        assert note is None and client.patches == 0 and annotations['converge.virt/task-state'] == 'STOPPING'


def test_recover_stale_reads_the_power_kubevirt_carries_out():
    # a stop interrupted after runStrategy became Halted, the instance still shutting down: STOPPED
    client, vm, obs = _kvm('Halted', vmi_object(), _task('STOPPING', time.time() - 5, 'elsewhere:1'))
    assert obs['power_state'] == 'RUNNING'
    assert vm.recover_stale(obs, time.time())['vm_state'] == 'STOPPED'
    assert client.vm['metadata']['annotations'] == {'converge.virt/vm-state': 'STOPPED'}


def test_record_vm_state():
    client, vm, obs = _kvm('Halted', None, {'converge.virt/vm-state': 'ACTIVE', 'converge.virt/previous-vm-state': 'STOPPED'})
    vm.record_vm_state(obs, 'STOPPED')
    assert client.vm['metadata']['annotations'] == {'converge.virt/vm-state': 'STOPPED', 'converge.virt/previous-vm-state': 'STOPPED'}
    client, vm, obs = _kvm('Halted', None, _task('STOPPING', time.time() + 60, 'elsewhere:1'))
    with pytest.raises(TaskConflict):
        vm.record_vm_state(obs, 'STOPPED')
    assert client.patches == 0


def test_module_reads_and_examines_kubevirt_vms():
    now = time.time()
    halted = module.kubevirt_reading(observed('Halted', vmi_object(), vm_state='ACTIVE'))
    assert halted == {'name': 'a', 'vm_state': 'ACTIVE', 'power_state': 'SHUTDOWN', 'task_state': None, 'task_id': None, 'lease_until': None,
                      'task_owner': None, 'recorded': True}
    entry = module.examine(halted, now, PARAMS)
    assert (entry['kind'], entry['decision'], entry['action']) == ('power', 'record STOPPED', 'state=stopped')
    restart = module.examine(halted, now, dict(PARAMS, restart_stopped_guests=True))
    assert restart['action'] == 'state=running'
    # an instance deleted under runStrategy Always is being replaced: no disagreement
    assert module.examine(module.kubevirt_reading(observed('Always', None, vm_state='ACTIVE')), now, PARAMS) is None
    # a VM the collection never recorded is not judged
    unrecorded = module.kubevirt_reading(observed('Halted', vmi_object()))
    assert not unrecorded['recorded'] and module.examine(unrecorded, now, PARAMS) is None
    sneaky = module.examine(module.kubevirt_reading(observed('Always', vmi_object(), vm_state='STOPPED')), now, PARAMS)
    assert (sneaky['decision'], sneaky['action']) == ('force stop', 'state=stopped (forced)')
    stale = module.kubevirt_reading(observed('Halted', None, vm_state='ACTIVE', task_state='STOPPING', lease_until=repr(now - 1),
                                             task_owner='elsewhere:1'))
    assert module.examine(stale, now, PARAMS)['kind'] == 'stale task'
    assert module.examine(stale, now, PARAMS)['reason'].startswith('the lease ran out')
    live = dict(stale, lease_until=repr(now + 60))
    assert module.examine(live, now, PARAMS) is None


@pytest.mark.parametrize('params, field', [
    ({'backend': 'kubevirt', 'uri': 'qemu:///system'}, 'uri'),
    ({'backend': 'kubevirt', 'username': 'root'}, 'username'),
    ({'backend': 'kubevirt', 'password': 'x'}, 'password'),
    ({'backend': 'kubevirt', 'namespace': 'Bad_Name'}, 'namespace'),
    ({'backend': 'kubevirt', 'namespace': 'x' * 64}, 'namespace'),
    ({'backend': 'libvirt', 'kubeconfig': '/k'}, 'kubeconfig'),
    ({'backend': 'libvirt', 'namespace': 'demo'}, 'namespace'),
    ({'backend': 'libvirt', 'api_key': 'token'}, 'api_key'),
    ({'backend': 'libvirt', 'validate_certs': False}, 'validate_certs'),
])
def test_options_of_the_other_backend_are_refused(params, field):
    refused = module.refused_option(params)
    assert refused is not None and refused[0] == field
    assert 'token' not in refused[1] and "'x'" not in refused[1]


@pytest.mark.parametrize('params', [
    {'backend': 'kubevirt', 'namespace': 'demo', 'kubeconfig': '/k', 'api_key': 'token'},
    {'backend': 'kubevirt'},
    {'backend': 'libvirt', 'uri': 'qemu:///system', 'password': 'x'},
    {'backend': 'libvirt', 'namespace': 'default'},     # the option's default
])
def test_options_of_the_backend_are_accepted(params):
    assert module.refused_option(params) is None


# ----------------------------------------------------------------- forged records (issue 24, finding 5)
# A namespace user with `patch` on VirtualMachines may write any converge.virt/* annotation.

@pytest.mark.parametrize('lease', ['nan', 'inf', '-inf', '1e18', '1e400'])
def test_a_forged_lease_in_the_annotations_is_stale(lease):
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt.taskstore import record_from_annotations
    record = record_from_annotations(dict(_task('STOPPING', 0, 'elsewhere:1'), **{'converge.virt/lease-until': lease}))
    assert record.task_id == 'old' and record.stale(time.time()) and record.stale_reason(time.time())


@pytest.mark.parametrize('lease', ['nan', 'inf', '1e18', 'thirty days ahead'])
def test_a_forged_lease_is_recovered_with_its_reason(lease):
    # a time in the parameters would differ between xdist workers' collections
    lease = repr(time.time() + 30 * 86400) if lease == 'thirty days ahead' else lease
    annotations = dict(_task('STOPPING', 0, 'elsewhere:1'), **{'converge.virt/lease-until': lease})
    client, vm, obs = _kvm('Halted', None, annotations)
    note = vm.recover_stale(obs, time.time())
    assert note['recovered_task'] == 'STOPPING' and note['vm_state'] == 'STOPPED', note
    assert 'not a finite number' in note['reason'] or 'longest possible task' in note['reason'], note
    assert client.vm['metadata']['annotations'] == {'converge.virt/vm-state': 'STOPPED'}


def test_examine_reports_a_forged_lease_as_stale_with_the_reason():
    reading = module.kubevirt_reading(observed('Always', vmi_object(), vm_state='ACTIVE', task_state='STOPPING', task_id='x',
                                               lease_until='1e18', task_owner='elsewhere:1'))
    entry = module.examine(reading, time.time(), PARAMS)
    assert (entry['kind'], entry['action']) == ('stale task', 'recover') and 'longest possible task' in entry['reason'], entry


def test_a_forged_deleting_task_is_only_recovered():
    reading = module.kubevirt_reading(observed('Always', vmi_object(), vm_state='ACTIVE', task_state='DELETING', task_id='x',
                                               lease_until='nan', task_owner='elsewhere:1'))
    entry = module.examine(reading, time.time(), PARAMS)
    assert (entry['kind'], entry['decision'], entry['action']) == ('stale task', 'finish delete', 'recover'), entry
    assert '_fix' not in entry and 'never deletes' in entry['note']


@pytest.mark.parametrize('vm_state', ['DELETED', 'SOFT_DELETED'])
def test_a_forged_deleted_record_is_reported_only(vm_state):
    reading = module.kubevirt_reading(observed('Always', vmi_object(), vm_state=vm_state))
    entry = module.examine(reading, time.time(), PARAMS)
    assert (entry['kind'], entry['decision'], entry['action']) == ('power', 'finish delete', 'none'), entry
    assert entry['_fix'] is None and 'never deletes' in entry['note']


class FakeVm:
    """A vm backend whose observations are scripted; records whether a fix ran."""

    def __init__(self, readings):
        self.readings = list(readings)

    def observe(self):
        return self.readings.pop(0)


def _sneaky():
    return module.kubevirt_reading(observed('Always', vmi_object(), vm_state='STOPPED'))


@pytest.mark.parametrize('second, runs', [
    (_sneaky(), True),                                              # both reads agree: forced off
    (dict(_sneaky(), vm_state='ACTIVE'), False),                    # the record changed in between
    (dict(_sneaky(), task_state='STARTING', task_id='t'), False),   # a task started in between
    (dict(_sneaky(), power_state='SHUTDOWN'), False),               # the guest went off meanwhile
    (None, False),                                                  # the VM is gone
])
def test_a_destructive_fix_needs_two_reads_that_agree(second, runs):
    entry = module.examine(_sneaky(), time.time(), PARAMS)
    assert entry['action'] == 'state=stopped (forced)'
    calls = []

    def converge(vm, decl, declared, options, check_mode):
        del vm, declared, check_mode
        calls.append((decl.state, options.shutdown_timeout))
        return True, {'steps': [{'action': 'stop'}], 'vm': {'vm_state': 'STOPPED'}}

    module._apply(FakeVm([second]), entry, dict(PARAMS, shutdown_timeout=60), converge, vb.KubevirtOptions,  # pylint: disable=protected-access
                  lambda reading: reading)
    if runs:
        assert calls == [('stopped', 0)] and entry['done'] and 'note' not in entry
    else:
        assert calls == [] and not entry['done'] and entry['note'].startswith('not fixed'), entry


def test_a_fix_that_is_not_destructive_needs_no_second_read():
    halted = module.kubevirt_reading(observed('Halted', vmi_object(), vm_state='ACTIVE'))
    entry = module.examine(halted, time.time(), PARAMS)
    assert entry['action'] == 'state=stopped' and entry['power_state'] == 'SHUTDOWN'
    calls = []

    def converge(vm, decl, declared, options, check_mode):
        del vm, declared, options, check_mode
        calls.append(decl.state)
        return True, {'steps': [{'action': 'record'}], 'vm': {'vm_state': 'STOPPED'}}

    module._apply(FakeVm([]), entry, dict(PARAMS, shutdown_timeout=60), converge, vb.KubevirtOptions,  # pylint: disable=protected-access
                  lambda reading: reading)
    assert calls == ['stopped'] and entry['done']
