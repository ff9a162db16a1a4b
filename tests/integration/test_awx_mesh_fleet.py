"""The collection's roles and a fleet through AWX's mesh, inside the EE, on both sites (issue 38 item 3).

The same mesh as tests/integration/test_awx_mesh.py (tools/awxlab: a control node, two execution nodes, each with a
site of two private libvirt hosts; jobs go ``ansible-runner transmit`` -> receptor -> ``ansible-runner worker`` in the
collection's EE -> ``ansible-runner process`` on the controller), the credential injected as AWX injects it (the
site's first host as LIBVIRT_DEFAULT_URI; the planted SASL password and SSH key as AWX's extra vars and key file).
On each site:

- the lifecycle role (``converge.virt.lifecycle``, the fleet declared in the job's extra vars, the password from the
  credential): a volume and two VMs brought up, the same job again changes nothing, then ``lifecycle_state: absent``
  takes the VMs down and keeps the volume;
- a fleet converge: a volume (``converge.virt.volume``), three VMs in one ``converge.virt.vm`` task (``vms``), a live
  migration of one of them to the site's second host (``converge.virt.migration``), a snapshot of the stopped one
  (``converge.virt.snapshot``); the same job again changes nothing (``if_moved: skip`` for the VM that moved);
- reconcile with its report: a VM destroyed behind the collection's back, the collection's own playbook
  (``converge.virt.reconcile``) run as the job starts it again and writes its Markdown report into the job's artifacts,
  which the worker sends back to the controller;
- an inventory update (``ansible-inventory`` with converge.virt.libvirt over both hosts of the site) lists each VM on
  the host it is on (the migrated one on the second host).

Every job's events carry per-host results (each task result and the play recap's stats name ``localhost``); the planted
secrets are in no artifact on the controller and no file of the lab (the nodes' work directories, the workers' temporary
dirs, every log, the sites' libvirt files).  Checked by libvirt from the controller: each site's world, and nothing of it
on the other site.  Opt-in like test_awx_mesh.py (``make test-awx``, CONVERGE_VIRT_AWX_MESH=1).
"""

# pylint: disable=redefined-outer-name

import json
import os

import libvirt
import pytest
import yaml

from tests.integration.awx_mesh_gate import require_mesh
from tools.virtlab import hosts as virtlab_hosts

require_mesh()

# pylint: disable=wrong-import-position
from tests.integration.test_awx_mesh import JOB_DEADLINE, LOST_AFTER, job_dir, mounts, node_leaks, site_uri  # noqa: E402
from tests.integration.test_awx_mesh import lab  # noqa: E402,F401 pylint: disable=unused-import
from tests.integration.test_awx_runner import leaks  # noqa: E402
from tools.awxlab import jobs, mesh  # noqa: E402

SITE_CREDENTIAL = {'username': "{{ converge_virt_libvirt_username | default(omit, true) }}",
                   'password': "{{ converge_virt_libvirt_password | default(omit, true) }}"}
URI = "{{ lookup('ansible.builtin.env', 'LIBVIRT_DEFAULT_URI') }}"


def lifecycle_playbook():
    """The job template's playbook: the role, the site and the password from the credential (as awx-credential-types.yml
    says: lifecycle_password from converge_virt_libvirt_password), the fleet from the job's extra vars."""
    return [{'name': 'A fleet by converge.virt.lifecycle, as an AWX job', 'hosts': 'localhost', 'gather_facts': False,
             'roles': [{'role': 'converge.virt.lifecycle',
                        'lifecycle_username': SITE_CREDENTIAL['username'], 'lifecycle_password': SITE_CREDENTIAL['password']}]}]


def fleet_playbook():
    """Volume, fleet, migration and snapshot in one job (the site's first host from the credential)."""
    common = dict(SITE_CREDENTIAL, uri=URI)
    domain = '{{ fleet_domain_type }}'
    return [{'name': 'A fleet converged by an AWX job', 'hosts': 'localhost', 'gather_facts': False, 'tasks': [
        {'name': 'Provision the data volume', 'converge.virt.volume': dict(
            common, name='fl-data.qcow2', pool='fl-pool', pool_path='{{ fleet_pool_path }}', format='qcow2', capacity='16MiB')},
        {'name': 'Converge the fleet', 'converge.virt.vm': dict(
            common, memory='64MiB', domain_type=domain, shutdown_timeout=0, if_moved='skip', vms=[
                {'name': 'fl-a', 'state': 'running'},
                {'name': 'fl-b', 'state': 'running'},
                {'name': 'fl-c', 'state': 'stopped',
                 'disks': [{'dev': 'vdb', 'pool': 'fl-pool', 'volume': 'fl-data.qcow2', 'format': 'qcow2'}]}])},
        {'name': "Move fl-a to the site's second host", 'converge.virt.migration': dict(
            common, name='fl-a', target_uri='{{ fleet_target_uri }}')},
        {'name': 'Snapshot fl-c', 'converge.virt.snapshot': dict(common, vm='fl-c', name='fl-before')},
    ]}]


def fleet_absent_playbook():
    """What the fleet job made, removed (the snapshot first, fl-a on both hosts: its departure record on the first)."""
    common = dict(SITE_CREDENTIAL, uri=URI)
    return [{'name': 'The fleet removed by an AWX job', 'hosts': 'localhost', 'gather_facts': False, 'tasks': [
        {'name': 'Remove the snapshot', 'converge.virt.snapshot': dict(common, vm='fl-c', name='fl-before', state='absent')},
        {'name': 'Remove the VMs of the first host', 'converge.virt.vm': dict(
            common, state='absent', shutdown_timeout=0, vms=[{'name': 'fl-a'}, {'name': 'fl-b'}, {'name': 'fl-c'}])},
        {'name': 'Remove the VM that moved', 'converge.virt.vm': dict(
            SITE_CREDENTIAL, uri='{{ fleet_target_uri }}', name='fl-a', state='absent', shutdown_timeout=0)},
        {'name': 'Remove the data volume', 'converge.virt.volume': dict(
            common, name='fl-data.qcow2', pool='fl-pool', pool_path='{{ fleet_pool_path }}', state='absent')},
    ]}]


RECONCILE_PLAYBOOK = [{'name': "The collection's reconcile playbook", 'ansible.builtin.import_playbook': 'converge.virt.reconcile'}]


def run_job(lab, tmp_path, node, name, playbook, extra_vars=None, uri_index=0):
    """One job through the mesh (the site's host ``uri_index`` in the credential); (private data dir, secrets, status, events)."""
    pdd, hidden = job_dir(tmp_path, name, site_uri(lab, node, uri_index), extra_vars or {}, playbook)
    processed, state = jobs.run(lab['dir'], node, pdd, playbook='site.yml', timeout=JOB_DEADLINE, lost_after=LOST_AFTER,
                                **jobs.container_kwargs(mounts(lab, node)))
    events = jobs.events(pdd)
    assert (processed['status'], processed['rc']) == ('successful', 0), (name, processed, state, failures(events))
    return pdd, hidden, processed, events


def failures(events):
    """The failed task results of a job (what AWX shows in red), for assertion messages."""
    return [(event['event_data'].get('task'), (event['event_data'].get('res') or {}).get('msg'))
            for event in events if event.get('event') == 'runner_on_failed'][-3:]


def host_results(events):
    """The per-host results AWX shows of a job: every task result names its host (here localhost), and the play recap's
    stats give that host's counts; returns {ok, changed, failures, ...: count for localhost}."""
    results = [event for event in events if event.get('event', '').startswith('runner_on_')]
    assert results, [event.get('event') for event in events]
    assert {event['event_data'].get('host') for event in results} == {'localhost'}, results[:3]
    stats = [event['event_data'] for event in events if event.get('event') == 'playbook_on_stats']
    assert len(stats) == 1, [event.get('event') for event in events]
    recap = {key: (stats[0].get(key) or {}).get('localhost', 0)
             for key in ('ok', 'changed', 'failures', 'dark', 'skipped', 'rescued', 'ignored')}
    assert recap['ok'] > 0 and recap['failures'] == 0 and recap['dark'] == 0, recap
    return recap


def changed_tasks(events):
    """The tasks that reported changed (by task name), in order."""
    return [event['event_data'].get('task') for event in events
            if event.get('event') == 'runner_on_ok' and (event['event_data'].get('res') or {}).get('changed')]


def no_secret_anywhere(lab, pdd, events, hidden):
    found = leaks(os.path.join(pdd, 'artifacts'), {'events': json.dumps(events)}, hidden)
    assert found == [], found
    assert node_leaks(lab, hidden) == []


def world(uri):
    """{VM name: libvirt state} of the host ``uri``, read from the controller."""
    conn = libvirt.open(uri)
    try:
        return {dom.name(): dom.state()[0] for dom in conn.listAllDomains()}
    finally:
        conn.close()


def volumes(uri, pool):
    conn = libvirt.open(uri)
    try:
        try:
            return sorted(conn.storagePoolLookupByName(pool).listVolumes())
        except libvirt.libvirtError:
            return None
    finally:
        conn.close()


def snapshots(uri, name):
    conn = libvirt.open(uri)
    try:
        return sorted(conn.lookupByName(name).snapshotListNames())
    finally:
        conn.close()


RUNNING, SHUTOFF = libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_SHUTOFF


def other_site(lab, node):
    other = [each for each in mesh.NODES if each != node][0]
    return [site_uri(lab, other, index) for index in range(len(lab['nodes'][other]['hosts']))]


@pytest.mark.parametrize('node', mesh.NODES)
def test_the_lifecycle_role_brings_a_fleet_up_and_takes_it_down_through_the_mesh(lab, tmp_path, node):
    uri = site_uri(lab, node)
    pool_path = os.path.join(lab['nodes'][node]['site'], 'lc-pool')
    fleet = {'lifecycle_volumes': [{'name': 'lc-data.qcow2', 'pool': 'lc-pool', 'pool_path': pool_path, 'format': 'qcow2',
                                    'capacity': '16MiB'}],
             'lifecycle_vms': [{'name': 'lc-web', 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(),
                                'disks': [{'dev': 'vdb', 'pool': 'lc-pool', 'volume': 'lc-data.qcow2', 'format': 'qcow2'}]},
                               {'name': 'lc-batch', 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(),
                                'state': 'stopped'}],
             'lifecycle_wait_timeout': 60, 'lifecycle_shutdown_timeout': 0}
    before_elsewhere = [world(each) for each in other_site(lab, node)]
    try:
        pdd, hidden, _processed, events = run_job(lab, tmp_path, node, f'lifecycle-up-{node}', lifecycle_playbook(), fleet)
        recap = host_results(events)
        assert recap['changed'] > 0, recap
        assert {key: value for key, value in world(uri).items() if key.startswith('lc-')} == {'lc-web': RUNNING, 'lc-batch': SHUTOFF}
        assert volumes(uri, 'lc-pool') == ['lc-data.qcow2']
        # the role's report, one line per VM, in the events AWX shows
        reported = json.dumps([event['event_data'].get('res') for event in events if event.get('event') == 'runner_on_ok'])
        assert 'lc-web' in reported and 'lc-batch' in reported
        # nothing of it on the other site
        assert [world(each) for each in other_site(lab, node)] == before_elsewhere
        no_secret_anywhere(lab, pdd, events, hidden)

        pdd, hidden, _processed, events = run_job(lab, tmp_path, node, f'lifecycle-again-{node}', lifecycle_playbook(), fleet)
        recap = host_results(events)
        assert (recap['changed'], changed_tasks(events)) == (0, []), recap
        no_secret_anywhere(lab, pdd, events, hidden)
    finally:
        pdd, hidden, _processed, events = run_job(lab, tmp_path, node, f'lifecycle-down-{node}', lifecycle_playbook(),
                                                  dict(fleet, lifecycle_state='absent'))
    host_results(events)
    assert not [key for key in world(uri) if key.startswith('lc-')], world(uri)
    # lifecycle_purge_volumes is false: the volume stays
    assert volumes(uri, 'lc-pool') == ['lc-data.qcow2']
    no_secret_anywhere(lab, pdd, events, hidden)


@pytest.mark.parametrize('node', mesh.NODES)
def test_a_fleet_migration_snapshot_reconcile_and_inventory_through_the_mesh(lab, tmp_path, node):  # pylint: disable=too-many-locals
    first, second = site_uri(lab, node, 0), site_uri(lab, node, 1)
    fleet_vars = {'fleet_domain_type': virtlab_hosts.diskless_domain_type(), 'fleet_target_uri': second,
                  'fleet_pool_path': os.path.join(lab['nodes'][node]['site'], 'fl-pool')}
    before_elsewhere = [world(each) for each in other_site(lab, node)]
    try:
        pdd, hidden, _processed, events = run_job(lab, tmp_path, node, f'fleet-{node}', fleet_playbook(), fleet_vars)
        host_results(events)
        assert changed_tasks(events) == ['Provision the data volume', 'Converge the fleet', "Move fl-a to the site's second host",
                                         'Snapshot fl-c'], changed_tasks(events)
        assert world(first) == {'fl-b': RUNNING, 'fl-c': SHUTOFF}, world(first)
        assert world(second) == {'fl-a': RUNNING}, world(second)
        assert volumes(first, 'fl-pool') == ['fl-data.qcow2'] and snapshots(first, 'fl-c') == ['fl-before']
        migrated = [event['event_data']['res'] for event in events
                    if event.get('event') == 'runner_on_ok' and event['event_data'].get('task', '').startswith('Move fl-a')][0]
        assert (migrated['phase'], migrated['on_target']) == ('Succeeded', True), migrated
        assert [world(each) for each in other_site(lab, node)] == before_elsewhere
        no_secret_anywhere(lab, pdd, events, hidden)

        # the same job again: nothing changes (fl-a moved: if_moved skip reports where it went)
        pdd, hidden, _processed, events = run_job(lab, tmp_path, node, f'fleet-again-{node}', fleet_playbook(), fleet_vars)
        assert (host_results(events)['changed'], changed_tasks(events)) == (0, []), changed_tasks(events)
        assert world(first) == {'fl-b': RUNNING, 'fl-c': SHUTOFF} and world(second) == {'fl-a': RUNNING}
        no_secret_anywhere(lab, pdd, events, hidden)

        # reconcile with its report: fl-b destroyed behind the collection's back (recorded ACTIVE), the collection's
        # playbook as the job starts it again; the report is written into the job's artifacts and comes back
        conn = libvirt.open(first)
        try:
            conn.lookupByName('fl-b').destroy()
        finally:
            conn.close()
        report = '/runner/artifacts/reconcile-{}/reconcile.md'.format(node)
        pdd, hidden, _processed, events = run_job(lab, tmp_path, node, f'reconcile-{node}', RECONCILE_PLAYBOOK,
                                                  {'reconcile_report_path': report, 'reconcile_trigger': 'AWX job'})
        assert host_results(events)['changed'] > 0
        assert world(first) == {'fl-b': RUNNING, 'fl-c': SHUTOFF}, world(first)
        with open(os.path.join(pdd, 'artifacts', f'reconcile-{node}', 'reconcile.md'), encoding='utf-8') as handle:
            text = handle.read()
        assert 'fl-b' in text, text
        reconciled = [event['event_data']['res'] for event in events if event.get('event') == 'runner_on_ok'
                      and 'fl-b' in json.dumps(event['event_data'].get('res') or {}) and (event['event_data'].get('res') or {}).get('changed')]
        assert reconciled, failures(events)
        no_secret_anywhere(lab, pdd, events, hidden)

        # an inventory update over both hosts of the site: each VM where it is
        pdd, hidden = job_dir(tmp_path, f'inventory-{node}', first)
        with open(os.path.join(pdd, 'inventory', 'site.converge_libvirt.yml'), 'w', encoding='utf-8') as handle:
            yaml.safe_dump({'plugin': 'converge.virt.libvirt', 'uris': [first, second]}, handle)
        ident = f'inventory-{node}'
        processed, state = jobs.run(lab['dir'], node, pdd, ident=ident, binary='ansible-inventory',
                                    cmdline=f'--list --export --output /runner/artifacts/{ident}/output.json',
                                    inventory='/runner/inventory/site.converge_libvirt.yml',
                                    **jobs.container_kwargs(mounts(lab, node)))
        assert (processed['status'], processed['rc']) == ('successful', 0), (processed, state)
        with open(os.path.join(pdd, 'artifacts', ident, 'output.json'), encoding='utf-8') as handle:
            listed = json.load(handle, object_hook=lambda obj: obj['__ansible_unsafe'] if list(obj) == ['__ansible_unsafe'] else obj)
        hostvars = listed['_meta']['hostvars']
        where = {name: (hostvars[name]['libvirt_uri'], hostvars[name]['vm_state'], hostvars[name]['power_state'])
                 for name in ('fl-a', 'fl-b', 'fl-c')}
        assert where == {'fl-a': (second, 'ACTIVE', 'RUNNING'), 'fl-b': (first, 'ACTIVE', 'RUNNING'),
                         'fl-c': (first, 'STOPPED', where['fl-c'][2])} and where['fl-c'][2] != 'RUNNING', where
        assert leaks(os.path.join(pdd, 'artifacts'), {}, hidden) == []
        assert node_leaks(lab, hidden) == []
    finally:
        pdd, hidden, _processed, events = run_job(lab, tmp_path, node, f'fleet-absent-{node}', fleet_absent_playbook(), fleet_vars)
    host_results(events)
    assert world(first) == {} and world(second) == {}, (world(first), world(second))
    assert volumes(first, 'fl-pool') == []
    no_secret_anywhere(lab, pdd, events, hidden)


def test_per_host_results_count_each_host():
    """host_results' own check: a task result of another host, or a failure in the recap, fails it."""
    ok = {'event': 'runner_on_ok', 'event_data': {'host': 'localhost', 'task': 't', 'res': {}}}
    stats = {'event': 'playbook_on_stats', 'event_data': {'ok': {'localhost': 1}, 'changed': {}, 'failures': {}, 'dark': {}}}
    assert host_results([ok, stats])['ok'] == 1
    with pytest.raises(AssertionError):
        host_results([ok, {'event': 'runner_on_ok', 'event_data': {'host': 'other', 'task': 't'}}, stats])
    with pytest.raises(AssertionError):
        host_results([ok, dict(stats, event_data=dict(stats['event_data'], failures={'localhost': 1}))])
