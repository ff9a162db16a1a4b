"""The converge.virt.evacuate role end to end on three private libvirt hosts, through ansible-playbook.

Host 0 holds a booted TCG guest rewriting its memory, a running diskless
guest, a stopped diskless VM and a VM whose name is taken by a different VM
on both targets (its migration fails). The role drains host 0: the others
move, the failure is reported per VM and the role fails naming it; once the
conflict is gone, re-running continues and leaves host 0 empty. The drained
host is refused as a target afterwards.
"""

import os

import libvirt
import pytest
import yaml

from tests.integration.ansible_run import run_module, run_playbook
from tools.virtlab import domains, hosts as virtlab_hosts


@pytest.fixture(scope='module')
def lab(tmp_path_factory, virtlab_layout):
    state_dir = str(tmp_path_factory.mktemp('evaclab'))
    started = virtlab_hosts.start_hosts(3, state_dir, **virtlab_layout(2))
    try:
        yield started
    finally:
        virtlab_hosts.stop_hosts(state_dir)


def where(conns, name):
    out = []
    for index, conn in enumerate(conns):
        try:
            dom = conn.lookupByName(name)
            out.append((index, dom.state()[0]))
        except libvirt.libvirtError:
            pass
    return out


def playbook(tmp_path, lab):
    path = os.path.join(str(tmp_path), 'evacuate.yml')
    play = [{'hosts': 'localhost', 'gather_facts': False, 'tasks': [
        {'name': 'Evacuate', 'ansible.builtin.include_role': {'name': 'converge.virt.evacuate'},
         'vars': {'evacuate_uri': lab[0].uri, 'evacuate_target_uris': [lab[1].uri, lab[2].uri], 'evacuate_parallel': 2,
                  'evacuate_reason': 'test maintenance'}},
    ]}]
    with open(path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump(play, handle)
    return path


def task_results(data, name):
    out = []
    for play in data['plays']:
        for task in play['tasks']:
            if task['task']['name'].endswith(name):
                out.append(task['hosts']['localhost'])
    return out


def test_evacuate_drains_the_host(lab, guest_image, tmp_path):
    conns = [libvirt.open(h.uri) for h in lab]
    try:
        _dom, log = domains.start_kernel_guest(conns[0], lab[0], 'evac-busy', guest_image)
        domains.wait_for_console(log)
        domains.start_diskless_guest(conns[0], 'evac-diskless')
        conns[0].defineXML(domains.diskless_domain_xml('evac-stopped', virtlab_hosts.diskless_domain_type()))
        domains.start_diskless_guest(conns[0], 'evac-conflict')
        for conn in conns[1:]:  # a different VM with the same name on every target: this one cannot move
            domains.start_diskless_guest(conn, 'evac-conflict')
        path = playbook(tmp_path, lab)

        rc, data = run_playbook(path)
        assert rc != 0, 'the role must fail while a VM stays on the drained host'
        report = task_results(data, 'Report per VM what happened')[0]['ansible_facts']['evacuate_report']
        by_name = dict((r['name'], r) for r in report)
        assert set(by_name) == {'evac-busy', 'evac-diskless', 'evac-stopped', 'evac-conflict'}
        assert by_name['evac-conflict']['failed'] and 'evac-conflict' in by_name['evac-conflict']['msg']
        for name in ('evac-busy', 'evac-diskless'):
            assert not by_name[name]['failed'] and by_name[name]['mode'] == 'live' and by_name[name]['phase'] == 'Succeeded'
            assert [i for i, state in where(conns, name) if state == libvirt.VIR_DOMAIN_RUNNING] in ([1], [2])
        assert by_name['evac-stopped']['mode'] == 'offline' and not by_name['evac-stopped']['failed']
        assert where(conns, 'evac-stopped')[0][0] in (1, 2) and len(where(conns, 'evac-stopped')) == 1
        assert (0, libvirt.VIR_DOMAIN_RUNNING) in where(conns, 'evac-conflict'), 'the failed VM keeps running on the source'

        info = run_module('host', {'uri': lab[0].uri})
        assert info['host']['draining'] and info['host']['drain']['reason'] == 'test maintenance'
        assert info['host']['running_vms'] == ['evac-conflict']
        holder = where(conns, 'evac-diskless')[0][0]
        refused = run_module('migration', {'uri': lab[holder].uri, 'name': 'evac-diskless', 'target_uri': lab[0].uri})
        assert refused['_rc'] != 0 and refused['reason'] == 'the target host is being drained', refused

        for conn in conns[1:]:
            domains.remove_domain(conn, 'evac-conflict')
        rc, data = run_playbook(path)
        assert rc == 0, data
        report = task_results(data, 'Report per VM what happened')[0]['ansible_facts']['evacuate_report']
        assert [r['name'] for r in report] == ['evac-conflict'] and report[0]['phase'] == 'Succeeded'
        assert not task_results(data, 'Mark the host draining (nothing is placed or migrated onto it any more)')[0]['changed']
        after = run_module('host', {'uri': lab[0].uri})
        assert after['host']['vms'] == [] and after['host']['draining']
        for name in ('evac-busy', 'evac-diskless', 'evac-conflict'):
            assert [i for i, state in where(conns, name) if state == libvirt.VIR_DOMAIN_RUNNING] in ([1], [2])

        rc, data = run_playbook(path)
        assert rc == 0 and task_results(data, 'Report per VM what happened')[0]['ansible_facts']['evacuate_report'] == []
        active = run_module('host', {'uri': lab[0].uri, 'state': 'active'})
        assert active['changed'] and not active['host']['draining']
    finally:
        for conn in conns:
            conn.close()
