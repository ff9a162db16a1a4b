"""Forged task records on a real private libvirt host (issue 24, finding 5), through the ansible CLI.

Whoever may write a domain's ``<metadata>`` may write any task record, and whoever may define secrets on the
daemon may define one with the usage of a VM's task mutex. Written behind the collection's back here:

* a task whose lease is NaN, infinite, or 10^18 s (some 3*10^10 years) ahead: the next vm run recovers it (reported with the
  reason) and acts, the next migration recovers it and moves the VM (the evacuate role can drain);
* a record saying DELETED, and a stale DELETING task: ``reconcile fix=true`` deletes nothing;
* a secret holding the VM's task mutex "since" the far future, or since NaN: the next run breaks it.
"""

import time
import xml.etree.ElementTree as ET

import libvirt
import pytest

from tests.integration.ansible_run import ok, run_module
from tools.virtlab import hosts as virtlab_hosts

NS = 'https://converge.virt/xmlns/vm/1'
FORGED_LEASES = ['nan', 'inf', '1e18']


@pytest.fixture(scope='module')
def hosts(libvirt_hosts):
    return libvirt_hosts[0], libvirt_hosts[1]


@pytest.fixture(scope='module')
def conns(hosts):
    opened = [libvirt.open(h.uri) for h in hosts]
    yield opened
    for conn in opened:
        conn.close()


def small(host, name, **extra):
    args = {'uri': host.uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(), 'shutdown_timeout': 0}
    args.update(extra)
    return args


def forge(dom, **fields):
    """Write a record into the domain's metadata as anyone with write access to it can."""
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import metadata  # pylint: disable=import-outside-toplevel
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG | (libvirt.VIR_DOMAIN_AFFECT_LIVE if dom.isActive() else 0)
    dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata.converge_metadata_element(fields), 'converge', NS, flags)


def record(dom):
    text = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NS, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    return dict((child.tag.split('}')[-1], child.text) for child in ET.fromstring(text))


def defined(conn, name):
    return name in [d.name() for d in conn.listAllDomains()]


def test_a_forged_lease_is_recovered_by_the_next_run(hosts, conns):
    host, conn = hosts[0], conns[0]
    name = 'fr-lease'
    try:
        ok(run_module('vm', small(host, name, state='running')))
        dom = conn.lookupByName(name)
        for generation, lease in enumerate(FORGED_LEASES, start=20):
            forge(dom, vm_state='ACTIVE', task_state='STOPPING', task_id='forged-%d' % generation, last_action='stop', lease_until=lease,
                  owner='elsewhere:1', generation=str(generation))
            report = ok(run_module('reconcile', {'uri': host.uri, 'name': [name]}))
            entry = report['disagreements'][0]
            assert (entry['kind'], entry['task_state'], entry['action']) == ('stale task', 'STOPPING', 'recover'), entry
            assert 'not a finite number' in entry['reason'] or 'longest possible task' in entry['reason'], entry
            stopped = ok(run_module('vm', small(host, name, state='stopped')))
            assert stopped['recovered']['recovered_task_id'] == 'forged-%d' % generation, stopped
            assert 'not a finite number' in stopped['recovered']['reason'] or 'longest possible task' in stopped['recovered']['reason']
            assert [step['action'] for step in stopped['steps']] == ['stop'] and stopped['vm']['vm_state'] == 'STOPPED', stopped
            ok(run_module('vm', small(host, name, state='running')))
        assert record(dom).get('task_state') is None and record(dom)['vm_state'] == 'ACTIVE'
    finally:
        run_module('vm', small(host, name, state='absent'))


def test_reconcile_fix_never_deletes_on_a_forged_record(hosts, conns):
    host, conn = hosts[0], conns[0]
    name = 'fr-deleted'
    args = {'uri': host.uri, 'name': [name], 'fix': True}
    try:
        ok(run_module('vm', small(host, name, state='running')))
        dom = conn.lookupByName(name)
        # the record says the VM was deleted, and its guest runs (Nova would finish the delete)
        forge(dom, vm_state='DELETED', generation='30')
        fixed = ok(run_module('reconcile', args))
        entry = fixed['disagreements'][0]
        assert (entry['decision'], entry['action'], entry['done']) == ('finish delete', 'none', False), entry
        assert 'never deletes' in entry['note'] and not fixed['changed']
        assert defined(conn, name) and conn.lookupByName(name).isActive()
        # a DELETING task whose run is "gone": the task is cleared, the VM kept as the hypervisor shows it
        forge(dom, vm_state='ACTIVE', task_state='DELETING', task_id='forged-del', last_action='delete', lease_until=repr(time.time() - 5),
              generation='31')
        fixed = ok(run_module('reconcile', args))
        entry = fixed['disagreements'][0]
        assert (entry['decision'], entry['action'], entry['done']) == ('finish delete', 'recover', True), entry
        assert 'never deletes' in entry['note'] and entry['steps'][0]['recovered_task'] == 'DELETING', entry
        assert defined(conn, name) and conn.lookupByName(name).isActive()
        assert record(dom).get('task_state') is None and record(dom)['vm_state'] == 'ACTIVE'
        again = ok(run_module('reconcile', args))
        assert again['disagreements'] == [] and not again['changed']
    finally:
        run_module('vm', small(host, name, state='absent'))


def _forged_mutex(conn, dom, stamp):
    root = ET.Element('secret', {'ephemeral': 'no', 'private': 'yes'})
    ET.SubElement(root, 'description').text = 'converge.virt task mutex %s held by elsewhere:1' % stamp
    ET.SubElement(ET.SubElement(root, 'usage', {'type': 'volume'}), 'volume').text = 'converge-lock:' + dom.UUIDString()
    return conn.secretDefineXML(ET.tostring(root, encoding='unicode'), 0)


@pytest.mark.parametrize('stamp', ['1e18', 'nan'])
def test_a_forged_task_mutex_is_broken(hosts, conns, stamp):
    host, conn = hosts[0], conns[0]
    name = 'fr-mutex'
    try:
        ok(run_module('vm', small(host, name, state='stopped')))
        # how long a run that takes the mutex at once lasts on this machine now (start-up included: alone it can pass
        # 15 s on a loaded machine, which made an absolute bound flaky)
        start = time.monotonic()
        ok(run_module('vm', small(host, name, state='stopped')))
        baseline = time.monotonic() - start
        dom = conn.lookupByName(name)
        _forged_mutex(conn, dom, stamp)
        start = time.monotonic()
        started = ok(run_module('vm', small(host, name, state='running')))
        # the mutex is waited for at most 15 s (taskstore.MUTEX_TIMEOUT); a forged one is broken at once
        assert time.monotonic() - start - baseline < 15, ('the run waited out the forged mutex', time.monotonic() - start, baseline)
        assert [step['action'] for step in started['steps']] == ['start'] and started['vm']['vm_state'] == 'ACTIVE'
        with pytest.raises(libvirt.libvirtError):
            conn.secretLookupByUsage(libvirt.VIR_SECRET_USAGE_TYPE_VOLUME, 'converge-lock:' + dom.UUIDString())
    finally:
        for secret in conn.listAllSecrets():
            if (secret.usageID() or '').startswith('converge-lock:'):
                secret.undefine()
        run_module('vm', small(host, name, state='absent'))


def test_a_migration_recovers_a_forged_lease(hosts, conns):
    """A forged task does not keep a VM on a host being drained: the migration recovers it and moves the VM."""
    name = 'fr-migrate'
    try:
        ok(run_module('vm', small(hosts[0], name, state='stopped')))
        forge(conns[0].lookupByName(name), vm_state='STOPPED', task_state='STARTING', task_id='forged-start', last_action='start',
              lease_until='inf', generation='40')
        moved = ok(run_module('migration', {'uri': hosts[0].uri, 'name': name, 'target_uri': hosts[1].uri, 'mode': 'offline'}))
        assert moved['changed'] and moved['phase'] == 'Succeeded', moved
        assert any('forged-start' in note and 'not a finite number' in note for note in moved.get('notes', [])), moved
        assert defined(conns[1], name) and not defined(conns[0], name)
        assert record(conns[1].lookupByName(name)).get('task_state') is None
        # a forged MIGRATING record (the pick-up path) far in the future, on the new host
        forge(conns[1].lookupByName(name), vm_state='STOPPED', task_state='MIGRATING', task_id='forged-mig', last_action='offline_migrate',
              lease_until='1e18', generation='41')
        back = ok(run_module('migration', {'uri': hosts[1].uri, 'name': name, 'target_uri': hosts[0].uri, 'mode': 'offline'}))
        assert back['changed'] and back['phase'] == 'Succeeded' and defined(conns[0], name) and not defined(conns[1], name), back
    finally:
        for host, conn in zip(hosts, conns):
            if defined(conn, name):
                run_module('vm', small(host, name, state='absent'))


@pytest.mark.parametrize('module, extra, field', [
    ('vm', {'wait_timeout': 86401}, 'wait_timeout'),
    ('vm', {'shutdown_timeout': 10 ** 12}, 'shutdown_timeout'),
    ('migration', {'completion_timeout': 86401}, 'completion_timeout'),
    ('reconcile', {'shutdown_timeout': 86401}, 'shutdown_timeout'),
])
def test_a_timeout_past_one_day_is_refused(hosts, conns, module, extra, field):
    """Timeouts bound the longest lease a real task takes: past one day, a module refuses the option and changes nothing."""
    name = 'fr-timeout'
    if module == 'vm':
        args = small(hosts[0], name, state='running', **extra)
    elif module == 'migration':
        args = dict({'uri': hosts[0].uri, 'name': name, 'target_uri': hosts[1].uri}, **extra)
    else:
        args = dict({'uri': hosts[0].uri, 'fix': True}, **extra)
    result = run_module(module, args)
    assert result.get('failed') and result['msg'].startswith(field + ': must be at most 86400'), result
    assert not defined(conns[0], name) and not defined(conns[1], name)
