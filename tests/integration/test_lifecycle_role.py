"""The converge.virt.lifecycle role's refusals and safety rules, through ansible-playbook on a private libvirt host.

(The happy paths - up, idempotent, reachable on the console, down with graceful and forced stops, volume kept,
no-op second decommission, purge - are the molecule scenarios roles/lifecycle/molecule/{default,kubevirt}.)

- bad declarations fail before anything is touched, naming the field;
- with lifecycle_force_stop false, a guest that ignores the ACPI power button makes the role fail naming it, and
  nothing is undefined;
- decommissioning one VM detaches only its own attachment of a volume another VM also uses, and a purge of that
  volume is refused naming the other VM: the volume and the other VM's disk stay.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import json
import os

import libvirt
import pytest
import yaml

from tests.integration.ansible_run import run_module, run_playbook
from tools.virtlab import hosts as virtlab_hosts


@pytest.fixture(scope='module')
def host(tmp_path_factory, virtlab_layout):
    state_dir = str(tmp_path_factory.mktemp('lifecyclelab'))
    started = virtlab_hosts.start_hosts(1, state_dir, **virtlab_layout(3))
    try:
        yield started[0]
    finally:
        virtlab_hosts.stop_hosts(state_dir)


def role_play(tmp_path, role_vars):
    path = os.path.join(str(tmp_path), 'lifecycle.yml')
    play = [{'hosts': 'localhost', 'gather_facts': False, 'tasks': [
        {'name': 'Lifecycle', 'ansible.builtin.include_role': {'name': 'converge.virt.lifecycle'}, 'vars': role_vars}]}]
    with open(path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump(play, handle)
    return path


def failure(data):
    for play in data['plays']:
        for task in play['tasks']:
            result = task['hosts'].get('localhost', {})
            if result.get('failed'):
                items = [item.get('msg', '') for item in result.get('results', []) if item.get('failed')]
                return task['task']['name'], ' '.join(items) or result.get('msg', '')
    raise AssertionError('no task failed: %s' % json.dumps(data)[-2000:])


def domains(uri):
    conn = libvirt.open(uri)
    try:
        return sorted((dom.name(), dom.state()[0]) for dom in conn.listAllDomains())
    finally:
        conn.close()


def names(uri):
    result = run_module('vm_info', {'uri': uri})
    assert result['_rc'] == 0, result
    return dict((vm['name'], vm) for vm in result['vms'])


@pytest.mark.parametrize('role_vars,field,reason', [
    ({'lifecycle_vms': [{'name': 'dup', 'memory': '64MiB'}, {'name': 'dup', 'memory': '64MiB'}]}, 'lifecycle_vms', 'unique names'),
    ({'lifecycle_vms': [{'name': 'lost', 'memory': '64MiB', 'reachable': {'host': '192.0.2.1'}}]}, 'lifecycle_vms[lost].reachable', 'needs port'),
    ({'lifecycle_state': 'gone'}, 'lifecycle_state', 'must be one of'),
    ({'lifecycle_backend': 'xen'}, 'lifecycle_backend', 'must be one of'),
])
def test_bad_declarations_fail_naming_the_field_and_touch_nothing(host, tmp_path, role_vars, field, reason):
    before = domains(host.uri)
    rc, data = run_playbook(role_play(tmp_path, dict({'lifecycle_uri': host.uri}, **role_vars)))
    assert rc != 0
    _task, msg = failure(data)
    assert field in msg and reason in msg, msg
    assert domains(host.uri) == before


def test_no_forced_stop_unless_allowed(host, tmp_path):
    fleet = {'lifecycle_uri': host.uri,
             'lifecycle_vms': [{'name': 'lc-noos', 'memory': '64MiB', 'domain_type': 'qemu', 'title': 'no OS, ignores ACPI'}]}
    rc, data = run_playbook(role_play(tmp_path, fleet))
    assert rc == 0, failure(data)
    assert names(host.uri)['lc-noos']['status'] == 'Running'

    rc, data = run_playbook(role_play(tmp_path, dict(fleet, lifecycle_state='absent', lifecycle_force_stop=False, lifecycle_shutdown_timeout=2)))
    assert rc != 0
    task, msg = failure(data)
    assert 'Refuse to force them off' in task and 'lc-noos did not shut down within 2s' in msg and 'nothing was undefined' in msg, msg
    seen = names(host.uri)['lc-noos']
    assert seen['exists'] and seen['power_state'] == 'RUNNING'

    rc, data = run_playbook(role_play(tmp_path, dict(fleet, lifecycle_state='absent', lifecycle_shutdown_timeout=0)))
    assert rc == 0, failure(data)
    assert 'lc-noos' not in names(host.uri)


def test_shared_volume_keeps_the_other_vms_attachment_and_is_never_purged_while_used(host, tmp_path):
    pool = {'pool': 'lc-pool', 'pool_path': str(tmp_path / 'pool')}
    volume = dict(pool, name='lc-shared.raw', capacity='4MiB')
    disk = {'dev': 'vdb', 'pool': 'lc-pool', 'volume': 'lc-shared.raw', 'format': 'raw'}
    ours = {'lifecycle_uri': host.uri, 'lifecycle_volumes': [volume],
            'lifecycle_vms': [{'name': 'lc-ours', 'memory': '64MiB', 'domain_type': 'qemu', 'state': 'stopped', 'disks': [disk]}]}
    rc, data = run_playbook(role_play(tmp_path, ours))
    assert rc == 0, failure(data)
    other = run_module('vm', {'uri': host.uri, 'name': 'lc-other', 'memory': '64MiB', 'domain_type': 'qemu', 'state': 'stopped', 'disks': [disk]})
    assert other['_rc'] == 0, other

    rc, data = run_playbook(role_play(tmp_path, dict(ours, lifecycle_state='absent', lifecycle_purge_volumes=True)))
    assert rc != 0
    task, msg = failure(data)
    assert 'Delete the declared volumes' in task and 'lc-shared.raw' in msg and 'lc-other' in msg, msg

    seen = names(host.uri)
    assert 'lc-ours' not in seen and seen['lc-other']['exists']
    info = run_module('volume_info', {'uri': host.uri, 'pool': 'lc-pool', 'name': ['lc-shared.raw']})
    vol = info['volumes'][0]
    assert vol['exists'] and [a['vm'] for a in vol['attachments']] == ['lc-other']
    conn = libvirt.open(host.uri)
    try:
        assert "volume='lc-shared.raw'" in conn.lookupByName('lc-other').XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    finally:
        conn.close()
