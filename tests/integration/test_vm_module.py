"""converge.virt.vm on real private libvirt hosts, driven through the ansible CLI.

Covers every row of the action table the vm module uses, idempotence, check
mode, diff, refused transitions, graceful vs forced stop of a booted guest,
two runs on one VM at once, recovery of a stale task, the fleet form, bad
input and credentials in the URI.
"""

import time

import libvirt
import pytest

from tests.integration.ansible_run import finish, ok, run_module, start_module
from tools.virtlab import domains, hosts as virtlab_hosts

NS = 'https://converge.virt/xmlns/vm/1'


def exists(conn, name):
    try:
        conn.lookupByName(name)
        return True
    except libvirt.libvirtError:
        return False


def small(host, name, **extra):
    args = {'uri': host.uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(),
            'shutdown_timeout': 1}
    args.update(extra)
    return args


def actions(result):
    return [step['action'] for step in result['steps']]


def test_every_action_through_the_module(host, conn):
    name = 'vm-actions'
    checked = run_module('vm', small(host, name, state='running'), check=True)
    assert checked['changed'] and actions(checked) == ['create', 'start']
    assert not exists(conn, name), 'check mode must not define the VM'

    created = run_module('vm', small(host, name, state='running'), diff=True)
    assert created['changed'] and actions(created) == ['create', 'start']
    assert (created['vm']['vm_state'], created['vm']['power_state'], created['vm']['status'], created['vm']['phase']) == \
        ('ACTIVE', 'RUNNING', 'Running', 'Running')
    assert created['diff']['before']['vm_state'] == 'DELETED' and created['diff']['after']['vm_state'] == 'ACTIVE'

    again = run_module('vm', small(host, name, state='running'))
    assert not again['changed'] and again['steps'] == []
    assert not run_module('vm', small(host, name, state='running'), check=True)['changed']

    paused = run_module('vm', small(host, name, state='paused'))
    assert actions(paused) == ['pause'] and paused['vm']['status'] == 'Paused' and paused['vm']['vm_state'] == 'PAUSED'
    assert conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_PAUSED

    unpaused = run_module('vm', small(host, name, state='running'))
    assert actions(unpaused) == ['unpause'] and unpaused['vm']['power_state'] == 'RUNNING'

    suspended = run_module('vm', small(host, name, state='suspended'))
    assert actions(suspended) == ['suspend'] and suspended['vm']['vm_state'] == 'SUSPENDED' and suspended['vm']['managed_save']
    assert conn.lookupByName(name).hasManagedSaveImage(0)

    resumed = run_module('vm', small(host, name, state='running'))
    assert actions(resumed) == ['resume'] and resumed['vm']['vm_state'] == 'ACTIVE'

    old_id = conn.lookupByName(name).ID()
    restarted = run_module('vm', small(host, name, state='restarted'))
    assert actions(restarted) == ['reboot_soft'] and restarted['changed']
    assert conn.lookupByName(name).ID() != old_id, 'restart must produce a new boot'

    run_module('vm', small(host, name, state='paused'))
    hard = run_module('vm', small(host, name, state='restarted'))
    assert actions(hard) == ['reboot_hard'] and hard['vm']['power_state'] == 'RUNNING'

    stopped = run_module('vm', small(host, name, state='stopped'))
    assert actions(stopped) == ['stop'] and stopped['vm']['vm_state'] == 'STOPPED' and stopped['vm']['status'] == 'Stopped'
    assert stopped['vm']['state_reason'] == 'destroyed', 'no ACPI in a diskless guest: forced off after the timeout'

    refused = run_module('vm', small(host, name, state='paused'))
    assert refused.get('failed') and 'vm_state is STOPPED' in refused['msg']
    assert conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_SHUTOFF

    updated = run_module('vm', small(host, name, state='present', memory='96MiB', title='resized'))
    assert actions(updated) == ['update'] and updated['vm']['memory_kib'] == 96 * 1024
    assert {c['path'] for c in updated['changes']} == {'memory', 'title'}

    removed = run_module('vm', small(host, name, state='absent'))
    assert actions(removed) == ['delete'] and not exists(conn, name)
    assert not run_module('vm', small(host, name, state='absent'))['changed']


def test_force_stop_false_fails_with_the_observed_state(host, conn):
    name = 'vm-noforce'
    run_module('vm', small(host, name, state='running'))
    result = run_module('vm', small(host, name, state='stopped', force_stop=False))
    assert result.get('failed') and 'force_stop is false' in result['msg']
    assert result['last_observed']['power_state'] == 'RUNNING'
    assert conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_RUNNING
    meta = run_module('vm_info', {'uri': host.uri, 'name': name})['vms'][0]
    assert meta['task_state'] is None and meta['vm_state'] == 'ACTIVE', 'a failed stop is rolled back: vm_state unchanged'
    run_module('vm', small(host, name, state='absent'))


def test_definition_change_pending_restart_then_applied(host, conn):
    name = 'vm-pending'
    run_module('vm', small(host, name, state='running'))
    changed = run_module('vm', small(host, name, state='running', memory='80MiB'), diff=True)
    assert actions(changed) == ['update'] and changed['vm']['pending_restart'] is True
    assert [(c['path'], c['kind']) for c in changed['changes']] == [('memory', 'restart')]
    dom = conn.lookupByName(name)
    assert dom.maxMemory() == 64 * 1024, 'the running guest keeps its memory until restart'
    same = run_module('vm', small(host, name, state='running', memory='80MiB'))
    assert not same['changed'] and same['vm']['pending_restart'] is True
    applied = run_module('vm', small(host, name, state='running', memory='80MiB', restart_on_change=True))
    assert actions(applied) == ['reboot_soft'] and applied['vm']['pending_restart'] is False
    assert conn.lookupByName(name).maxMemory() == 80 * 1024
    assert not run_module('vm', small(host, name, state='running', memory='80MiB', restart_on_change=True))['changed']
    run_module('vm', small(host, name, state='absent'))


def kernel_args(host, image, name, **extra):
    args = {'uri': host.uri, 'name': name, 'memory': '128MiB', 'domain_type': 'qemu',
            'boot': {'kernel': image.kernel, 'initrd': image.initrd, 'cmdline': image.cmdline},
            'serial': domains.console_log_path(host, name), 'shutdown_timeout': 60}
    args.update(extra)
    return args


def test_graceful_stop_of_a_booted_guest(host, guest_image):
    name = 'vm-booted'
    started = run_module('vm', kernel_args(host, guest_image, name, state='running'))
    assert started['vm']['status'] == 'Running', started
    domains.wait_for_console(domains.console_log_path(host, name), guest_image.ready_marker, timeout=120)
    graceful = run_module('vm', kernel_args(host, guest_image, name, state='stopped', force_stop=False))
    assert not graceful.get('failed'), graceful
    assert graceful['vm']['state_reason'] == 'shutdown', 'the booted guest powers off on ACPI: graceful, not destroyed'
    assert graceful['vm']['vm_state'] == 'STOPPED' and graceful['vm']['phase'] == 'Succeeded'
    run_module('vm', kernel_args(host, guest_image, name, state='running'))
    forced = run_module('vm', kernel_args(host, guest_image, name, state='stopped', shutdown_timeout=0))
    assert forced['vm']['state_reason'] == 'destroyed'
    run_module('vm', kernel_args(host, guest_image, name, state='absent'))


def test_a_stopped_guest_says_why_its_phase_is_what_it_is(host, conn):
    """KubeVirt's rule for a destroyed domain (isACPIEnabled): Failed after a graceful shutdown ran out of time,
    Succeeded after an immediate power-off; the result says which (phase_reason), and a new boot forgets it."""
    name = 'vm-phase-reason'
    ok(run_module('vm', small(host, name, state='running')))
    # the diskless guest ignores ACPI: the 1 s graceful shutdown runs out and the stop forces it off
    timed_out = ok(run_module('vm', small(host, name, state='stopped', shutdown_timeout=1)))
    assert (timed_out['vm']['state_reason'], timed_out['vm']['phase']) == ('destroyed', 'Failed'), timed_out['vm']
    assert 'grace period' in timed_out['vm']['phase_reason'], timed_out['vm']
    info = ok(run_module('vm_info', {'uri': host.uri, 'name': name}))
    assert (info['vms'][0]['phase'], info['vms'][0]['phase_reason']) == ('Failed', timed_out['vm']['phase_reason'])
    ok(run_module('vm', small(host, name, state='running')))
    assert 'stop_grace_period' not in conn.lookupByName(name).metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NS, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    at_once = ok(run_module('vm', small(host, name, state='stopped', shutdown_timeout=0)))
    assert (at_once['vm']['state_reason'], at_once['vm']['phase']) == ('destroyed', 'Succeeded'), at_once['vm']
    assert 'at once' in at_once['vm']['phase_reason'], at_once['vm']
    run_module('vm', small(host, name, state='absent', shutdown_timeout=0))


def _wait_for_task(conn, name, task_state, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        meta = conn.lookupByName(name).metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NS, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        if '<task_state>%s' % task_state in meta:
            return
        time.sleep(0.05)
    pytest.fail('the first run never took the task')


def test_two_runs_on_one_vm_never_both_act(host, conn):
    # run A stops a guest that ignores ACPI, so it holds STOPPING until the guest is off; run B comes while A holds the
    # task. The guest is powered off (from outside, as if it finally obeyed) only once B has answered: however slowly
    # B starts on a loaded machine, A still holds the task when B reads it (a fixed shutdown_timeout raced B's start).
    name = 'vm-race'
    run_module('vm', small(host, name, state='running'))
    run_a = start_module('vm', small(host, name, state='stopped', shutdown_timeout=600))
    try:
        _wait_for_task(conn, name, 'STOPPING')
        busy = run_module('vm', small(host, name, state='paused'))
        assert conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_RUNNING, 'B must not have acted (nor A finished)'
    finally:
        if conn.lookupByName(name).isActive():
            conn.lookupByName(name).destroy()
    result_a = finish(run_a)
    assert busy.get('failed') and 'busy' in busy['msg'] and busy['task_state'] == 'STOPPING', busy
    assert not result_a.get('failed') and actions(result_a) == ['stop'], result_a
    assert conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_SHUTOFF

    # with lock_timeout, B waits for A and then acts on what A left
    run_module('vm', small(host, name, state='running'))
    run_a = start_module('vm', small(host, name, state='stopped', shutdown_timeout=30))
    _wait_for_task(conn, name, 'STOPPING')
    waited = run_module('vm', small(host, name, state='running', lock_timeout=120))
    result_a = finish(run_a)
    assert not result_a.get('failed') and not waited.get('failed'), (result_a, waited)
    assert actions(result_a) == ['stop'] and actions(waited) == ['start']
    assert waited['vm']['vm_state'] == 'ACTIVE'
    # B came while A held the task (A's stop of the guest that ignores ACPI lasts shutdown_timeout, 30 s, from the STOPPING
    # read above), and says it waited that task out; a B that came after A had ended would have planned without waiting
    assert waited['waited_for']['task_state'] == 'STOPPING' and waited['waited_for']['owner'], waited
    run_module('vm', small(host, name, state='absent', shutdown_timeout=0))


def _set_record(dom, **fields):
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import metadata
    dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata.converge_metadata_element(fields), 'converge', NS,
                    libvirt.VIR_DOMAIN_AFFECT_CONFIG | libvirt.VIR_DOMAIN_AFFECT_LIVE)


def test_stale_task_is_recovered_and_a_live_one_is_respected(host, conn):
    name = 'vm-stale'
    run_module('vm', small(host, name, state='running'))
    dom = conn.lookupByName(name)
    _set_record(dom, vm_state='ACTIVE', task_state='STOPPING', task_id='killed-run', last_action='stop',
                lease_until=repr(time.time() + 600), generation='50')
    live = run_module('vm', small(host, name, state='running'))
    assert live.get('failed') and live['task_id'] == 'killed-run', 'a task whose lease runs is in flight: refuse'
    _set_record(dom, vm_state='ACTIVE', task_state='STOPPING', task_id='killed-run', last_action='stop',
                lease_until=repr(time.time() - 1), generation='51')
    recovered = run_module('vm', small(host, name, state='running'))
    assert not recovered.get('failed'), recovered
    assert recovered['recovered']['recovered_task'] == 'STOPPING' and recovered['recovered']['recovery'] == 'redo'
    assert recovered['vm']['task_state'] is None and recovered['vm']['vm_state'] == 'ACTIVE'
    run_module('vm', small(host, name, state='absent'))


def test_fleet_form(host, conn):
    names = ['fleet-%02d' % i for i in range(12)]
    vms = [{'name': n, 'memory': '64MiB', 'domain_type': 'qemu', 'state': 'stopped' if i % 3 else 'present'} for i, n in enumerate(names)]
    first = run_module('vm', {'uri': host.uri, 'vms': vms, 'parallel': 4})
    assert first['changed'] and len(first['results']) == 12 and all(r['changed'] for r in first['results'])
    assert all(exists(conn, n) for n in names)
    second = run_module('vm', {'uri': host.uri, 'vms': vms, 'parallel': 4})
    assert not second['changed'] and all(r['steps'] == [] for r in second['results'])
    gone = run_module('vm', {'uri': host.uri, 'vms': [{'name': n, 'state': 'absent'} for n in names]})
    assert gone['changed'] and not any(exists(conn, n) for n in names)


def test_fleet_top_level_state_and_options_are_defaults_of_every_item(host, conn):
    """state: running next to a list of names defines and starts every VM (it was ignored: defined, none started);
    the top-level memory is every item's default unless the item gives its own; a per-VM option is refused, naming it."""
    names = ['fleet-run-%d' % i for i in range(3)]
    args = {'uri': host.uri, 'state': 'running', 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(),
            'shutdown_timeout': 0, 'vms': [{'name': names[0], 'memory': '96MiB'}, {'name': names[1]}, {'name': names[2], 'state': 'present'}]}
    try:
        started = ok(run_module('vm', args))
        by_name = dict((r['name'], r) for r in started['results'])
        assert [actions(by_name[n]) for n in names] == [['create', 'start'], ['create', 'start'], ['create']]
        assert [conn.lookupByName(n).isActive() for n in names] == [1, 1, 0]
        assert [conn.lookupByName(n).maxMemory() for n in names] == [96 * 1024, 64 * 1024, 64 * 1024]
        assert not ok(run_module('vm', args))['changed']
        refused = run_module('vm', dict(args, uuid='8a3d3f4e-4d1c-4b39-9b0e-2f1d9c7e5a11', state='stopped'))
        assert refused['failed'] and refused['msg'].startswith('uuid') and not refused.get('changed')
        assert [conn.lookupByName(n).isActive() for n in names] == [1, 1, 0]
    finally:
        run_module('vm', {'uri': host.uri, 'shutdown_timeout': 0, 'vms': [{'name': n, 'state': 'absent'} for n in names]})
    assert not any(exists(conn, n) for n in names)


@pytest.mark.parametrize('args,field', [
    ({'memory': 'lots'}, 'memory'),
    ({'memory': '-5MiB'}, 'memory'),
    ({'vcpus': 0}, 'vcpus'),
    ({'disks': [{'dev': 'vdb', 'path': '../../etc/passwd'}]}, 'disks[0]'),
    ({'boot': {'kernel': 'relative/vmlinuz'}}, 'boot.kernel'),
    ({'shutdown_timeout': -1}, 'shutdown_timeout'),
])
def test_bad_input_names_the_field_and_changes_nothing(host, conn, args, field):
    name = 'vm-bad'
    result = run_module('vm', small(host, name, state='running', **args))
    assert result.get('failed') and result['msg'].startswith(field), result['msg']
    assert not exists(conn, name)


def test_xml_metacharacters_in_name_are_data(host, conn):
    name = "odd <name> & 'quote' \"dq\" ;$(id)"
    result = run_module('vm', small(host, name, state='present', title='$(touch /tmp/pwned) `id`'))
    assert not result.get('failed'), result
    dom = conn.lookupByName(name)
    assert dom.name() == name
    assert not run_module('vm', small(host, name, state='present', title='$(touch /tmp/pwned) `id`'))['changed']
    run_module('vm', small(host, name, state='absent'))


def test_password_in_uri_is_never_shown(host):
    canary = 'Canary-Pw-7f3a91'
    uri = 'qemu+tcp://someone:%s@%s:1/system' % (canary, host.address)  # nothing listens on port 1
    result = run_module('vm', {'uri': uri, 'name': 'x', 'state': 'present', 'password': canary})
    assert result.get('failed')
    assert canary not in repr(result)
    for module in ('vm', 'vm_info'):
        only_in_uri = run_module(module, {'uri': uri, 'name': 'x'} if module == 'vm' else {'uri': uri})
        assert only_in_uri.get('failed') and canary not in repr(only_in_uri), (module, only_in_uri)


def test_vm_info_reports_the_words_the_vm_module_returns(host, conn):
    results = {
        'info-run': run_module('vm', small(host, 'info-run', state='running'))['vm'],
        'info-stop': run_module('vm', small(host, 'info-stop', state='stopped'))['vm'],
        'info-pause': run_module('vm', small(host, 'info-pause', state='running'))['vm'],
    }
    results['info-pause'] = run_module('vm', small(host, 'info-pause', state='paused'))['vm']
    info = run_module('vm_info', {'uri': host.uri, 'name': sorted(results) + ['info-missing']})
    assert not info['changed']
    by_name = {vm['name']: vm for vm in info['vms']}
    for name, from_module in results.items():
        for word in ('vm_state', 'power_state', 'task_state', 'status', 'phase', 'state_reason', 'vcpus', 'memory_kib', 'uuid'):
            assert by_name[name][word] == from_module[word], (name, word, by_name[name][word], from_module[word])
    assert by_name['info-missing']['exists'] is False and by_name['info-missing']['vm_state'] == 'DELETED'
    assert by_name['info-pause']['status'] == 'Paused' and by_name['info-stop']['status'] == 'Stopped'
    running = run_module('vm_info', {'uri': host.uri, 'status': ['Running']})
    assert 'info-run' in [vm['name'] for vm in running['vms']] and all(vm['status'] == 'Running' for vm in running['vms'])
    stopped = run_module('vm_info', {'uri': host.uri, 'vm_state': ['STOPPED']})
    assert 'info-stop' in [vm['name'] for vm in stopped['vms']] and 'info-run' not in [vm['name'] for vm in stopped['vms']]
    run_module('vm', {'uri': host.uri, 'vms': [{'name': n, 'state': 'absent'} for n in results], 'shutdown_timeout': 0})


def test_a_guest_that_stopped_itself_is_recorded_stopped(host, conn):
    # Nova _sync_power_states: vm_state ACTIVE with power SHUTDOWN means the guest
    # shut itself down; the next run records STOPPED instead of restarting it
    name = 'vm-selfstop'
    run_module('vm', small(host, name, state='running'))
    conn.lookupByName(name).destroy()          # behind the collection's back
    info = run_module('vm_info', {'uri': host.uri, 'name': [name]})['vms'][0]
    assert info['vm_state'] == 'ACTIVE' and info['power_state'] == 'SHUTDOWN', 'vm_info shows the drift'
    checked = run_module('vm', small(host, name, state='stopped'), check=True)
    assert checked['changed'] and checked['steps'][0]['action'] == 'record'
    recorded = run_module('vm', small(host, name, state='stopped'))
    assert recorded['changed'] and recorded['steps'] == [{'action': 'record', 'task_state': None, 'vm_state_before': 'ACTIVE',
                                                          'vm_state_after': 'STOPPED'}]
    assert recorded['vm']['vm_state'] == 'STOPPED'
    assert not run_module('vm', small(host, name, state='stopped'))['changed']
    run_module('vm', small(host, name, state='absent'))


def test_vm_disks_hotplug_through_the_volume_planner(host, conn, tmp_path):
    # the vm module's disks and the volume module share one reconciler: a disk
    # declared on a running VM is hot-plugged; one removed stays plugged until
    # the next restart (never detached from a running guest without force)
    pool_dir = str(tmp_path / 'vmdisks')
    made = run_module('volume', {'uri': host.uri, 'pool': 'vmdisks', 'pool_path': pool_dir, 'name': 'data.raw', 'capacity': '1MiB'})
    assert not made.get('failed'), made
    name = 'vm-hotplug'
    base = small(host, name, state='running')
    run_module('vm', base)
    disk = [{'dev': 'vdb', 'pool': 'vmdisks', 'volume': 'data.raw', 'format': 'raw'}]
    planned = run_module('vm', dict(base, disks=disk), check=True)
    assert planned['changed'] and 'vdb' not in conn.lookupByName(name).XMLDesc(0)
    plugged = run_module('vm', dict(base, disks=disk))
    assert not plugged.get('failed'), plugged
    assert [op['op'] for op in plugged['disk_operations']] == ['attach_live']
    assert "dev='vdb'" in conn.lookupByName(name).XMLDesc(0), 'hot-plugged into the running guest'
    assert not run_module('vm', dict(base, disks=disk))['changed']
    unplug = run_module('vm', dict(base, disks=[]))
    assert not unplug.get('failed') and unplug['vm']['pending_restart'] is True
    assert 'needs force' in unplug['disk_refusals'][0]['reason']
    assert "dev='vdb'" in conn.lookupByName(name).XMLDesc(0), 'never unplugged from a running guest without force'
    assert "dev='vdb'" not in conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    restarted = run_module('vm', dict(base, disks=[], restart_on_change=True))
    assert not restarted.get('failed'), restarted
    assert "dev='vdb'" not in conn.lookupByName(name).XMLDesc(0)
    run_module('vm', small(host, name, state='absent'))
    assert not run_module('volume', {'uri': host.uri, 'pool': 'vmdisks', 'name': 'data.raw', 'state': 'absent'}).get('failed')
