# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The registry (plugins/module_utils/_providers): every registered backend loads for every resource, an unknown name fails loudly,
and a third backend (tests/unit/.../_skeleton, the ``memory`` backend) runs through the shared runners unchanged.

The conformance scenarios (issue 35 item 6) run the modules' own runners (``_common/*_run.py``) through
``_common.registry.run`` on the skeleton provider, whose world is the in-memory backend: create, start, stop with
grace, pause, delete, volume attach and detach, a task held by another run, a stale task.
"""

from __future__ import annotations

import functools
import time

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common import registry, snapshot_run, vm_run, volume_run
from ansible_collections.converge.virt.plugins.module_utils._common.provider import RESOURCES, OptionGroup, Provider
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import TaskRecord
from ansible_collections.converge.virt.plugins.module_utils._providers import migration, reconcile, snapshot, vm, vm_info, volume
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.inmemory_snapshots import snapshots_of
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._skeleton import provider as skeleton
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._skeleton import snapshot_runs as skeleton_snapshot
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._skeleton import vm_converge as skeleton_vm
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._skeleton import volume_runs as skeleton_volume

# resource group -> (its LOADERS, the resources it serves, what the shared runner calls on the backend's module)
INTERFACES = {
    'vm': (vm.LOADERS, ('vm',), ('options', 'declaration', 'agent', 'NO_PORT', 'vm', 'fleet_snapshot', 'probe')),
    'vm_info': (vm_info.LOADERS, ('vm_info',), ('vms',)),
    'volume': (volume.LOADERS, ('volume', 'volume_info'), ('declarations', 'converge', 'info')),
    'migration': (migration.LOADERS, ('migration', 'migration_info', 'host'),
                  ('session', 'options_from', 'connect', 'migrate_many', 'label', 'migration', 'migrations', 'check_host', 'host',
                   'host_errors')),
    'snapshot': (snapshot.LOADERS, ('snapshot', 'snapshot_info'), ('snapshots', 'info')),
    'reconcile': (reconcile.LOADERS, ('reconcile',), ('readings', 'fix')),
}


# ---------------------------------------------------------------- the registry
def test_the_resource_groups_cover_every_resource():
    assert sorted(r for _loaders, resources, _names in INTERFACES.values() for r in resources) == sorted(RESOURCES)


@pytest.mark.parametrize('group', sorted(INTERFACES))
@pytest.mark.parametrize('name', sorted(_providers.PROVIDERS))
def test_every_registered_backend_loads_for_every_resource(name, group):
    loaders, resources, names = INTERFACES[group]
    module = registry.load(loaders, group, name)
    assert module.__name__.split('.')[-2] == '_' + name, 'the %s module of %s is not in its own folder' % (group, name)
    assert [attr for attr in names if not hasattr(module, attr)] == []
    provider = _providers.PROVIDERS[name]
    assert isinstance(provider, Provider) and provider.name == name
    for resource in resources:
        assert isinstance(provider.options[resource], OptionGroup)


def test_the_argument_spec_offers_exactly_the_registered_backends():
    spec = _providers.argument_spec()
    assert spec['backend'] == {'type': 'str', 'choices': ['libvirt', 'kubevirt'], 'default': 'libvirt'}
    for provider in _providers.PROVIDERS.values():
        assert set(provider.connection_args) <= set(spec)


def test_an_unknown_backend_fails_loudly_naming_the_registered_ones():
    with pytest.raises(registry.UnknownBackend) as info:
        registry.select(_providers.PROVIDERS, 'proxmox')
    assert info.value.field == 'backend'
    assert info.value.message == "backend: no backend 'proxmox' is registered (registered: libvirt, kubevirt)"


def test_a_registered_backend_without_a_module_for_a_resource_fails_loudly():
    providers = dict(_providers.PROVIDERS, memory=skeleton.PROVIDER)
    with pytest.raises(registry.UnknownBackend) as info:
        registry.load(vm.LOADERS, 'vm', 'memory')
    assert info.value.message == "backend: backend 'memory' has no vm module (registered for vm: libvirt, kubevirt)"
    module = Module({'backend': 'memory', 'world': 'w'})
    with pytest.raises(Failed):
        registry.run(providers, 'vm_info', module, vm_info.LOADERS, lambda *args: pytest.fail('the runner ran'))
    assert module.failed == {'msg': module.failed['msg'], 'field': 'backend'} and "'memory' has no vm_info module" in module.failed['msg']


def test_a_run_with_an_unknown_backend_fails_before_any_runner():
    module = Module({'backend': 'proxmox'})
    with pytest.raises(Failed):
        _providers.run('vm_info', module, vm_info.LOADERS, lambda *args: pytest.fail('the runner ran'))
    assert module.failed['field'] == 'backend' and 'registered: libvirt, kubevirt' in module.failed['msg']


# ------------------------------------------------------- a module run, without Ansible
class Exited(SystemExit):
    """exit_json."""


class Failed(SystemExit):
    """fail_json."""


class Module:  # pylint: disable=too-few-public-methods
    """What the runners use of an AnsibleModule: params, check_mode, _diff, exit_json, fail_json, warn, no_log_values."""

    def __init__(self, params, check_mode=False):
        self.params = params
        self.check_mode = check_mode
        self._diff = True
        self.no_log_values = set()
        self.warnings = []
        self.result = self.failed = None

    def warn(self, text):
        self.warnings.append(text)

    def exit_json(self, **result):
        self.result = result
        raise Exited(0)

    def fail_json(self, **result):
        self.failed = result
        raise Failed(1)


PROVIDERS = dict(_providers.PROVIDERS, memory=skeleton.PROVIDER)
DEFINITIONS = dict((name, p.vm_definition) for name, p in PROVIDERS.items())
VM_LOADERS = dict(vm.LOADERS, memory=lambda: skeleton_vm)
VOLUME_LOADERS = dict(volume.LOADERS, memory=lambda: skeleton_volume)
SNAPSHOT_LOADERS = dict(snapshot.LOADERS, memory=lambda: skeleton_snapshot)


def validated(spec, params):
    checked = ArgumentSpecValidator(spec).validate(params)
    assert not checked.error_messages, checked.error_messages
    return dict(checked.validated_parameters)


def run_vm(world_name, check_mode=False, **params):
    """A vm task with backend memory, through the registry and the shared runner (as plugins/modules/vm.py runs)."""
    spec = vm_run.argument_spec(registry.argument_spec(PROVIDERS, 'libvirt'), DEFINITIONS)
    params = validated(spec, dict(params, backend='memory', world=world_name))
    params['state'] = params['state'] or 'present'
    module = Module(params, check_mode)
    with pytest.raises(SystemExit):
        registry.run(PROVIDERS, 'vm', module, VM_LOADERS, functools.partial(vm_run.run_vm, definitions=DEFINITIONS))
    return module


def run_volume(world_name, **params):
    spec = volume_run.argument_spec(registry.argument_spec(PROVIDERS, 'libvirt'), PROVIDERS)
    module = Module(validated(spec, dict(params, backend='memory', world=world_name)))
    with pytest.raises(SystemExit):
        registry.run(PROVIDERS, 'volume', module, VOLUME_LOADERS, volume_run.run_volume)
    return module


def run_snapshot(world_name, check_mode=False, **params):
    """A snapshot task with backend memory, through the registry and the shared runner (as plugins/modules/snapshot.py runs)."""
    spec = snapshot_run.argument_spec(registry.argument_spec(PROVIDERS, 'libvirt'))
    module = Module(validated(spec, dict(params, backend='memory', world=world_name)), check_mode)
    with pytest.raises(SystemExit):
        registry.run(PROVIDERS, 'snapshot', module, SNAPSHOT_LOADERS, snapshot_run.run_snapshot, check=snapshot_run.check)
    return module


def run_snapshot_info(world_name, **params):
    spec = registry.argument_spec(PROVIDERS, 'libvirt', vm=dict(type='str'), name=dict(type='list', elements='str'))
    module = Module(validated(spec, dict(params, backend='memory', world=world_name)))
    with pytest.raises(SystemExit):
        registry.run(PROVIDERS, 'snapshot_info', module, SNAPSHOT_LOADERS, snapshot_run.run_snapshot_info)
    return module


@pytest.fixture(name='world')
def world_fixture():
    world = skeleton.WORLDS['lab'] = skeleton.MemoryWorld()
    yield world
    del skeleton.WORLDS['lab']


def guest(world, name):
    return world.guests.get(name)


# ------------------------------------------------------------ conformance scenarios
def test_create(world):
    module = run_vm('lab', name='web', state='stopped', vcpus=2, memory='1GiB', generation=3)
    assert module.result['changed'] is True, module.failed
    assert [step['action'] for step in module.result['steps']] == ['create']
    assert guest(world, 'web').definition == {'vcpus': 2, 'memory': '1GiB', 'generation': 3}
    assert guest(world, 'web').power_state == s.SHUTDOWN and module.result['vm']['vm_state'] == s.STOPPED
    again = run_vm('lab', name='web', state='stopped', vcpus=2, memory='1GiB', generation=3)
    assert (again.result['changed'], again.result['steps']) == (False, [])


def test_create_in_check_mode_changes_nothing(world):
    module = run_vm('lab', check_mode=True, name='web', state='running', vcpus=2, memory='1GiB')
    assert module.result['changed'] is True and guest(world, 'web') is None and world.calls == []


def test_start(world):
    world.add('web', definition={'vcpus': 1}, record=TaskRecord(vm_state=s.STOPPED))
    module = run_vm('lab', name='web', state='running', vcpus=1)
    assert module.result['changed'] is True and [step['action'] for step in module.result['steps']] == ['start']
    assert guest(world, 'web').power_state == s.RUNNING and guest(world, 'web').store.load()[0] == TaskRecord(vm_state=s.ACTIVE)


def test_stop_with_grace(world):
    world.add('web', power_state=s.RUNNING, definition={'vcpus': 1}, record=TaskRecord(vm_state=s.ACTIVE))
    module = run_vm('lab', name='web', state='stopped', vcpus=1, shutdown_timeout=45, force_stop=False)
    assert module.result['changed'] is True
    assert world.with_options == [('web', 'stop', 45, False)], 'the stop was not given the declared grace'
    assert guest(world, 'web').power_state == s.SHUTDOWN


def test_pause(world):
    world.add('web', power_state=s.RUNNING, definition={'vcpus': 1}, record=TaskRecord(vm_state=s.ACTIVE))
    module = run_vm('lab', name='web', state='paused', vcpus=1)
    assert [step['action'] for step in module.result['steps']] == ['pause'] and guest(world, 'web').power_state == s.PAUSED


def test_delete(world):
    world.add('web', power_state=s.RUNNING, definition={'vcpus': 1}, record=TaskRecord(vm_state=s.ACTIVE))
    module = run_vm('lab', name='web', state='absent')
    assert module.result['changed'] is True and guest(world, 'web') is None
    assert module.result['vm']['exists'] is False


def test_a_task_held_by_another_run(world):
    held = TaskRecord(vm_state=s.STOPPED, task_state='STARTING', task_id='theirs', action='start', owner='other-run', lease_until=time.time() + 600)
    world.add('web', definition={'vcpus': 1}, record=held)
    module = run_vm('lab', name='web', state='running', vcpus=1)
    assert module.result is None and "VM 'web' is busy: task theirs (task_state STARTING)" in module.failed['msg']
    assert module.failed['owner'] == 'other-run'
    assert world.calls == [] and guest(world, 'web').store.load()[0].task_id == 'theirs'


def test_a_stale_task(world):
    world.add('web', power_state=s.RUNNING, definition={'vcpus': 1},
              record=TaskRecord(vm_state=s.ACTIVE, task_state='STOPPING', task_id='old', action='stop', owner='dead-run',
                                lease_until=time.time() + 600))
    world.dead.add('dead-run')
    module = run_vm('lab', name='web', state='running', vcpus=1)
    assert module.result['recovered']['reason'] == 'the run that held it (dead-run) is gone'
    assert guest(world, 'web').store.load()[0].idle()


def test_volume_attach_and_detach(world):
    world.volumes.running['web'] = True
    module = run_volume('lab', name='data', capacity=1024, attachments=[{'vm': 'web', 'dev': 'vdb'}])
    assert module.result['changed'] is True, module.failed
    assert [op['op'] for op in module.result['operations']] == ['create_volume', 'attach_config', 'attach_live']
    assert world.volumes.attachments == {('web', 'vdb'): ('data', True, True)}
    refused = run_volume('lab', name='data', capacity=1024, attachments=[])
    assert 'detaching from a running guest needs force' in refused.failed['msg'] and refused.failed['changed'] is False
    assert world.volumes.attachments == {('web', 'vdb'): ('data', True, True)}
    detached = run_volume('lab', name='data', capacity=1024, attachments=[], force=True)
    assert detached.result['changed'] is True and world.volumes.attachments == {}
    assert [op['op'] for op in detached.result['operations']] == ['detach_live', 'detach_config']


def test_an_option_of_another_backend_is_refused_before_the_skeleton_runs(world):
    module = run_vm('lab', name='web', state='running', kubeconfig='/k')
    assert module.failed == {'msg': 'kubeconfig: is a kubevirt connection option and is not used with backend memory', 'field': 'kubeconfig'}
    assert world.calls == []


def test_the_skeleton_definition_option_is_refused_by_the_other_backends():
    with pytest.raises(Exception) as info:
        vm_run.refuse_other_definition({'generation': 3}, 'libvirt', DEFINITIONS)
    assert str(info.value) == 'generation: is a memory option and is not supported with backend libvirt'


@pytest.mark.parametrize('params, field, reason', [
    ({'name': 'web', 'title': 'x'}, 'title', 'is a libvirt option and is not supported with backend memory'),
    ({'name': 'web', 'instancetype': 'u1.small'}, 'instancetype', 'is a kubevirt option; set backend: kubevirt'),
    ({'vms': [{'name': 'web', 'disks': [{'image': 'x'}]}]}, 'vms[0].disks[0].image', 'is a kubevirt option; set backend: kubevirt'),
])
def test_a_definition_option_of_another_backend_is_refused_by_the_runner(world, params, field, reason):
    module = run_vm('lab', state='running', **params)
    assert (module.failed['field'], module.failed['msg']) == (field, '%s: %s' % (field, reason))
    assert world.calls == [] and world.guests == {}


# ------------------------------------------------------------ snapshot scenarios (the driver: _common/snapshot_driver.py)
def snapshot_calls(world):
    return [call for call in world.calls if len(call) == 3]


def test_snapshot_create(world):
    world.add('web', power_state=s.RUNNING, definition={'vcpus': 1}, record=TaskRecord(vm_state=s.ACTIVE))
    module = run_snapshot('lab', vm='web', name='s1', description='before upgrade')
    assert module.result['changed'] is True, module.failed
    assert [op['op'] for op in module.result['operations']] == ['create_snapshot']
    assert module.result['snapshots'] == ['s1'] and module.result['diff'] == {'before': {'snapshots': []}, 'after': {'snapshots': ['s1']}}
    assert module.result['snapshot']['phase'] == 'Ready' and module.result['snapshot']['memory'] is True  # a running guest: memory by default
    assert snapshots_of(world, 'web')['s1'].vm_state_at_snapshot == 'running' and guest(world, 'web').store.load()[0].idle()
    again = run_snapshot('lab', vm='web', name='s1')
    assert (again.result['changed'], again.result['operations']) == (False, []) and snapshot_calls(world) == [('web', 'create_snapshot', 's1')]
    info = run_snapshot_info('lab', vm='web')
    assert [(snap['name'], snap['exists']) for snap in info.result['snapshots']] == [('s1', True)]


def test_snapshot_create_in_check_mode_changes_nothing(world):
    world.add('web', definition={'vcpus': 1}, record=TaskRecord(vm_state=s.STOPPED))
    module = run_snapshot('lab', check_mode=True, vm='web', name='s1')
    assert module.result['changed'] is True and module.result['snapshot'] == {'name': 's1', 'vm': 'web', 'phase': 'Pending', 'memory': False}
    assert module.result['snapshots'] == ['s1'] and snapshots_of(world, 'web') == {} and snapshot_calls(world) == []


def test_snapshot_restore_takes_a_safety_snapshot_first(world):
    world.add('web', power_state=s.RUNNING, definition={'vcpus': 1}, record=TaskRecord(vm_state=s.ACTIVE))
    snapshots_of(world, 'web')['s1'] = skeleton_snapshot_done('s1')  # taken while the guest was shut off
    module = run_snapshot('lab', vm='web', name='s1', state='restored')
    assert module.result['changed'] is True, module.failed
    safety = module.result['safety_snapshot']
    assert safety.startswith('s1-before-restore-') and snapshots_of(world, 'web')[safety].vm_state_at_snapshot == 'running'
    assert snapshot_calls(world) == [('web', 'create_snapshot', safety), ('web', 'restore_snapshot', 's1')]
    assert module.result['snapshot']['phase'] == 'Restored' and guest(world, 'web').power_state == s.SHUTDOWN
    assert sorted(module.result['snapshots']) == sorted(['s1', safety]) and guest(world, 'web').store.load()[0].idle()


def test_snapshot_delete(world):
    world.add('web', definition={'vcpus': 1}, record=TaskRecord(vm_state=s.STOPPED))
    run_snapshot('lab', vm='web', name='s1')
    module = run_snapshot('lab', vm='web', name='s1', state='absent')
    assert module.result['changed'] is True and module.result['snapshot'] == {'phase': 'absent'}
    assert snapshots_of(world, 'web') == {} and snapshot_calls(world)[-1] == ('web', 'delete_snapshot', 's1')
    again = run_snapshot('lab', vm='web', name='s1', state='absent')
    assert again.result['changed'] is False and len(snapshot_calls(world)) == 2


def test_a_snapshot_refused_while_another_run_holds_the_vm(world):
    held = TaskRecord(vm_state=s.STOPPED, task_state='STARTING', task_id='theirs', action='start', owner='other-run', lease_until=time.time() + 600)
    world.add('web', definition={'vcpus': 1}, record=held)
    for check_mode in (True, False):  # refused before any step, check mode too
        module = run_snapshot('lab', check_mode=check_mode, vm='web', name='s1')
        assert module.result is None and "VM 'web' is busy: task theirs (task_state STARTING)" in module.failed['msg']
    assert snapshot_calls(world) == [] and guest(world, 'web').store.load()[0].task_id == 'theirs'


def test_a_stale_snapshot_task_is_cleared_when_nothing_is_left_to_do(world):
    left = TaskRecord(vm_state=s.STOPPED, task_state='IMAGE_SNAPSHOT', task_id='old', action='snapshot', owner='dead-run',
                      lease_until=time.time() + 600)
    world.add('web', definition={'vcpus': 1}, record=left)
    snapshots_of(world, 'web')['s1'] = skeleton_snapshot_done('s1')
    world.dead.add('dead-run')
    module = run_snapshot('lab', vm='web', name='s1')
    assert module.result['changed'] is True and snapshot_calls(world) == []
    assert module.result['operations'] == [{'op': 'clear_stale_task', 'task_state': 'IMAGE_SNAPSHOT', 'task_id': 'old'}]
    assert guest(world, 'web').store.load()[0] == TaskRecord(vm_state=s.STOPPED)


def test_a_failed_snapshot_step_leaves_the_vm_free_and_fails_the_run(world):
    world.add('web', definition={'vcpus': 1}, record=TaskRecord(vm_state=s.STOPPED))
    world.fail[('web', 'create_snapshot')] = 'disk full'
    module = run_snapshot('lab', vm='web', name='s1')
    assert module.result is None and 'disk full' in module.failed['msg']
    assert snapshots_of(world, 'web') == {} and guest(world, 'web').store.load()[0] == TaskRecord(vm_state=s.STOPPED)


def skeleton_snapshot_done(name):
    from ansible_collections.converge.virt.plugins.module_utils._phase.snapshots import ActualSnapshot  # pylint: disable=import-outside-toplevel
    return ActualSnapshot(name, 1.0, None, (), 'shutoff', False, None)
