"""The reconcile role (and module) on a real private libvirt host.

Three kinds of drift are made behind the collection's back: a guest that shut
itself down (recorded ACTIVE), a guest started while recorded STOPPED, and a
task left by a killed run (lease expired). Report-only changes nothing; fix
repairs each as the phase model says; a second pass finds nothing.
"""

import os
import time

import libvirt
import yaml

from tests.integration.ansible_run import ROOT, run_module, run_playbook

NS = 'https://converge.virt/xmlns/vm/1'


def _args(host, name, state):
    return {'uri': host.uri, 'name': name, 'memory': '64MiB', 'domain_type': 'qemu', 'state': state, 'shutdown_timeout': 0}


def _playbook(tmp_path, host, fix, report):
    play = [{'hosts': 'localhost', 'gather_facts': False, 'roles': [{
        'role': 'converge.virt.reconcile', 'reconcile_uri': host.uri, 'reconcile_fix': fix,
        'reconcile_vms': ['rc-selfstop', 'rc-sneaky', 'rc-stale', 'rc-fine'], 'reconcile_report_path': report}]}]
    path = tmp_path / ('fix.yml' if fix else 'report.yml')
    path.write_text(yaml.safe_dump(play))
    return str(path)


def _result(out):
    for task in out['plays'][0]['tasks']:
        for res in task['hosts'].values():
            if 'disagreements' in res:
                return res
    raise AssertionError('no reconcile result in %r' % out)


def test_reconcile_role_reports_then_fixes(libvirt_hosts, tmp_path):
    host = libvirt_hosts[0]
    conn = libvirt.open(host.uri)
    try:
        for name, state in (('rc-selfstop', 'running'), ('rc-sneaky', 'stopped'), ('rc-stale', 'running'), ('rc-fine', 'running')):
            assert not run_module('vm', _args(host, name, state)).get('failed')
        conn.lookupByName('rc-selfstop').destroy()
        conn.lookupByName('rc-sneaky').create()
        from ansible_collections.converge.virt.plugins.module_utils._libvirt import metadata
        conn.lookupByName('rc-stale').setMetadata(
            libvirt.VIR_DOMAIN_METADATA_ELEMENT,
            metadata.converge_metadata_element({'vm_state': 'ACTIVE', 'task_state': 'PAUSING', 'task_id': 'gone', 'last_action': 'pause',
                                               'lease_until': repr(time.time() - 5), 'generation': '9'}),
            'converge', NS, libvirt.VIR_DOMAIN_AFFECT_CONFIG | libvirt.VIR_DOMAIN_AFFECT_LIVE)

        report = str(tmp_path / 'report.md')
        env = {'ANSIBLE_ROLES_PATH': os.path.join(ROOT, 'roles')}
        rc, out = run_playbook(_playbook(tmp_path, host, False, report), env=env)
        assert rc == 0, out
        found = {d['name']: d for d in _result(out)['disagreements']}
        assert set(found) == {'rc-selfstop', 'rc-sneaky', 'rc-stale'}, found
        assert found['rc-selfstop']['decision'] == 'record STOPPED' and found['rc-selfstop']['action'] == 'state=stopped'
        assert found['rc-sneaky']['decision'] == 'force stop' and found['rc-sneaky']['action'] == 'state=stopped (forced)'
        assert found['rc-stale']['kind'] == 'stale task' and found['rc-stale']['decision'] == 'redo'
        assert not any(d['done'] for d in found.values())
        assert conn.lookupByName('rc-sneaky').isActive(), 'report-only must change nothing'
        with open(report, encoding='utf-8') as handle:
            text = handle.read()
        assert '| rc-sneaky | STOPPED | RUNNING |' in text and 'report only' in text

        rc, out = run_playbook(_playbook(tmp_path, host, True, report), env=env)
        assert rc == 0, out
        fixed = {d['name']: d for d in _result(out)['disagreements']}
        assert all(d['done'] for d in fixed.values()), fixed
        assert not conn.lookupByName('rc-sneaky').isActive()
        info = {vm['name']: vm for vm in run_module('vm_info', {'uri': host.uri, 'name': ['rc-selfstop', 'rc-sneaky', 'rc-stale']})['vms']}
        assert info['rc-selfstop']['vm_state'] == 'STOPPED' and info['rc-sneaky']['vm_state'] == 'STOPPED'
        assert info['rc-stale']['task_state'] is None and info['rc-stale']['vm_state'] == 'ACTIVE'

        rc, out = run_playbook(_playbook(tmp_path, host, True, report), env=env)
        assert rc == 0 and _result(out)['disagreements'] == [] and not _result(out)['changed']
    finally:
        for name in ('rc-selfstop', 'rc-sneaky', 'rc-stale', 'rc-fine'):
            run_module('vm', _args(host, name, 'absent'))
        conn.close()


def test_an_interrupted_delete_is_not_finished_by_fix(libvirt_hosts):
    """A stale DELETING task (its run was killed, or the record was forged) is cleared by fix, and the VM kept.

    Nova's _init_instance finishes an interrupted delete; the record lives with the VM and whoever may write it may
    write any record, so reconcile never deletes on its strength alone (issue 24): state=absent finishes it.
    """
    host = libvirt_hosts[0]
    conn = libvirt.open(host.uri)
    try:
        assert not run_module('vm', _args(host, 'rc-deleting', 'running')).get('failed')
        from ansible_collections.converge.virt.plugins.module_utils._libvirt import metadata
        conn.lookupByName('rc-deleting').setMetadata(
            libvirt.VIR_DOMAIN_METADATA_ELEMENT,
            metadata.converge_metadata_element({'vm_state': 'ACTIVE', 'task_state': 'DELETING', 'task_id': 'killed', 'last_action': 'delete',
                                               'lease_until': repr(time.time() - 5), 'generation': '4'}),
            'converge', NS, libvirt.VIR_DOMAIN_AFFECT_CONFIG | libvirt.VIR_DOMAIN_AFFECT_LIVE)
        args = {'uri': host.uri, 'name': ['rc-deleting']}
        for extra, check in (({}, False), ({'fix': True}, True)):
            report = run_module('reconcile', dict(args, **extra), check=check)
            entry = report['disagreements'][0]
            assert entry['decision'] == 'finish delete' and entry['action'] == 'recover' and 'never deletes' in entry['note'], entry
            assert not entry['done'] and conn.lookupByName('rc-deleting').isActive()
        fixed = run_module('reconcile', dict(args, fix=True))
        entry = fixed['disagreements'][0]
        assert fixed['changed'] and entry['done'], fixed
        assert [step.get('recovery') for step in entry['steps']] == ['finish delete'] and entry['steps'][0]['vm_state'] == 'ACTIVE', entry
        assert 'rc-deleting' in [d.name() for d in conn.listAllDomains()] and conn.lookupByName('rc-deleting').isActive()
        again = run_module('reconcile', dict(args, fix=True))
        assert again['disagreements'] == [] and not again['changed']
        gone = run_module('vm', _args(host, 'rc-deleting', 'absent'))
        assert gone['changed'] and 'rc-deleting' not in [d.name() for d in conn.listAllDomains()], gone
    finally:
        run_module('vm', _args(host, 'rc-deleting', 'absent'))
        conn.close()


def test_report_playbook_writes_states_and_drift(libvirt_hosts, tmp_path):
    host = libvirt_hosts[1]
    conn = libvirt.open(host.uri)
    try:
        run_module('vm', _args(host, 'rp-run', 'running'))
        run_module('vm', _args(host, 'rp-drift', 'running'))
        conn.lookupByName('rp-drift').destroy()
        html = str(tmp_path / 'report.html')
        rc, out = run_playbook(os.path.join(ROOT, 'playbooks', 'report.yml'), extra_vars={'report_uris': [host.uri], 'report_path': html})
        assert rc == 0, out
        with open(html, encoding='utf-8') as handle:
            text = handle.read()
        assert '<td>rp-run</td><td>ACTIVE</td><td>RUNNING</td>' in text
        assert '<td>rp-drift</td><td>ACTIVE</td><td>SHUTDOWN</td><td>power</td><td>record STOPPED</td>' in text
        assert 'stateDiagram-v2' in text
    finally:
        for name in ('rp-run', 'rp-drift'):
            run_module('vm', _args(host, name, 'absent'))
        conn.close()


def test_password_only_in_the_uri_is_hidden_everywhere():
    canary = 'Canary-Uri-Only-51c2'
    for module in ('reconcile', 'volume_info'):
        result = run_module(module, {'uri': 'qemu+tcp://someone:%s@127.0.0.1:1/system' % canary})
        assert result.get('failed'), result
        assert canary not in repr(result), (module, result)


def test_password_only_in_a_migration_uri_is_hidden():
    canary = 'Canary-Mig-Uri-77aa'
    uri = 'qemu+tcp://someone:%s@127.0.0.1:1/system' % canary
    for module, args in (('migration', {'uri': uri, 'name': 'x', 'target_uri': uri}), ('migration_info', {'uris': [uri]}),
                         ('host', {'uri': uri})):
        result = run_module(module, args)
        assert canary not in repr(result), (module, result)
