"""converge.virt.libvirt inventory plugin against real private libvirt hosts.

State words agree with vm_info, readiness and ansible_host with the vm module's probe, groups, compose/keyed_groups, cache (a second
run is served from the cache), an unreachable host costs one warning and its
VMs are reported as Unknown from the cache, Jinja in names and titles is never
evaluated: not as a host variable, not as inventory_hostname, in compose or
keyed_groups, or as the address of a connection (issue 24; `make matrix` runs
this file on every ansible-core the collection claims).
"""

import json
import os
import re
import subprocess

import libvirt
import pytest
import yaml

from ansible_collections.converge.virt.plugins.module_utils._libvirt import readiness as libvirt_readiness
from ansible_collections.converge.virt.plugins.module_utils._phase.readiness import readiness_word
from tests.integration.ansible_run import ANSIBLE_CORE, BIN, ansible_env, flushed_hostvars, run_module, run_playbook, task_results, write_name_probe_play
from tools.virtlab import domains, hosts as virtlab_hosts

INJECTED_TITLE = "{{ lookup('pipe', 'id') }}"
INJECTED_NAME = 'inj-{{ 7 * 7 }}'
# a VM name that, evaluated, creates the file $CONVERGE_TEST_MARKER on the controller (libvirt accepts any name without '/')
HOSTILE_NAME = "inj-{{ lookup('pipe', 'touch $CONVERGE_TEST_MARKER') }}"
DEFAULT_VARS = ('vm_state', 'power_state', 'task_state', 'status', 'phase', 'state_reason', 'vcpus', 'memory_kib', 'uuid', 'host', 'libvirt_uri')


def write_config(path, uris, **extra):
    config = {'plugin': 'converge.virt.libvirt', 'uris': uris}
    config.update(extra)
    with open(path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump(config, handle)
    return path


def inventory_list(path):
    cmd = [os.path.join(BIN, 'ansible-inventory'), '-i', path, '--list', '--export']
    env = ansible_env({'ANSIBLE_INVENTORY_ENABLED': 'converge.virt.libvirt'})
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return _plain(json.loads(proc.stdout)), proc.stderr


def _plain(value):
    # ansible-inventory shows unsafe values as {"__ansible_unsafe": value}
    if isinstance(value, dict):
        if set(value) == {'__ansible_unsafe'}:
            return value['__ansible_unsafe']
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def define(conn, name, start=False, pause=False, title=None):
    dom = conn.defineXML(domains.diskless_domain_xml(name, domain_type='qemu', memory_mib=64))
    if title is not None:
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_TITLE, title, None, None, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    if start:
        dom.create()
    if pause:
        dom.suspend()
    return dom


@pytest.fixture(scope='module')
def fleet(libvirt_hosts, host_conns):
    made = []
    conn1, conn2 = host_conns
    made.append(define(conn1, 'inv-run', start=True))
    made.append(define(conn1, 'inv-pause', start=True, pause=True))
    made.append(define(conn2, 'inv-stop'))
    made.append(define(conn2, INJECTED_NAME, title=INJECTED_TITLE))
    yield libvirt_hosts
    for dom in made:
        domains.remove_domain(dom.connect(), dom.name())


def test_state_words_agree_with_vm_info_and_groups(fleet, host_conns, tmp_path):
    path = write_config(str(tmp_path / 'lab.converge_libvirt.yml'), [h.uri for h in fleet],
                        compose={'double_vcpus': 'vcpus * 2'}, groups={'small': 'memory_kib < 100000'},
                        keyed_groups=[{'key': 'status', 'prefix': 'st'}])
    data, _stderr = inventory_list(path)
    hostvars = data['_meta']['hostvars']
    for host in fleet:
        info = run_module('vm_info', {'uri': host.uri})
        for vm in info['vms']:
            if vm['name'] not in ('inv-run', 'inv-pause', 'inv-stop', INJECTED_NAME):
                continue
            for word in ('vm_state', 'power_state', 'task_state', 'status', 'phase', 'state_reason', 'vcpus', 'memory_kib', 'uuid'):
                assert hostvars[vm['name']][word] == vm[word], (vm['name'], word)
    assert hostvars['inv-run']['status'] == 'Running' and hostvars['inv-pause']['status'] == 'Paused'
    # readiness and ansible_host as the vm module's probe sees the same domains (running only; no agent channel, no lease here)
    for conn, name in ((host_conns[0], 'inv-run'), (host_conns[0], 'inv-pause'), (host_conns[1], 'inv-stop')):
        seen = libvirt_readiness.probe(conn.lookupByName(name))
        assert (hostvars[name].get('readiness'), hostvars[name].get('ansible_host')) == (readiness_word(seen), seen.address), name
    assert hostvars['inv-run']['readiness'] == 'running' and 'readiness' not in hostvars['inv-pause']
    # the default host variables: the state words, vcpus, memory, uuid, host and URI; the others only when asked for
    assert set(DEFAULT_VARS) <= set(hostvars['inv-stop']) and hostvars['inv-stop']['libvirt_uri'] == fleet[1].uri
    assert not set(hostvars['inv-stop']) & {'task_id', 'autostart', 'pending_restart', 'libvirt_name'}
    assert hostvars['inv-stop']['vm_state'] == 'STOPPED' and hostvars['inv-stop']['power_state'] == 'SHUTDOWN'
    # compose evaluates to native types from ansible-core 2.19 on; before, to text (unless jinja2_native)
    assert hostvars['inv-run']['double_vcpus'] == (2 if ANSIBLE_CORE >= (2, 19) else '2')
    assert 'inv-run' in data['vm_state_active']['hosts'] and 'inv-pause' in data['power_state_paused']['hosts']
    assert 'inv-stop' in data['status_stopped']['hosts'] and 'inv-stop' in data['st_Stopped']['hosts']
    assert set(data['small']['hosts']) >= {'inv-run', 'inv-pause', 'inv-stop'}
    host_group = 'libvirt_host_' + fleet[0].name.replace('-', '_')
    assert set(data[host_group]['hosts']) >= {'inv-run', 'inv-pause'} and 'inv-stop' not in data[host_group]['hosts']


def test_jinja_in_names_and_titles_is_never_evaluated(fleet, tmp_path):
    path = write_config(str(tmp_path / 'lab.converge_libvirt.yml'), [h.uri for h in fleet], with_title=True,
                        host_vars=list(DEFAULT_VARS) + ['libvirt_name', 'autostart'])
    data, _stderr = inventory_list(path)
    assert data['_meta']['hostvars'][INJECTED_NAME]['title'] == INJECTED_TITLE
    assert data['_meta']['hostvars'][INJECTED_NAME]['libvirt_name'] == INJECTED_NAME, 'asked for with host_vars'
    assert data['_meta']['hostvars']['inv-run']['autostart'] is False and 'task_id' not in data['_meta']['hostvars']['inv-run']
    play = tmp_path / 'show.yml'
    play.write_text(yaml.safe_dump([{'hosts': 'all', 'gather_facts': False, 'tasks': [
        {'ansible.builtin.debug': {'msg': 'T={{ title }} N={{ libvirt_name }}'}, 'when': "libvirt_name.startswith('inj-')"}]}]))
    env = {'ANSIBLE_INVENTORY_ENABLED': 'converge.virt.libvirt'}
    rc, out = run_playbook(str(play), env=env, inventory=path)
    assert rc == 0, out
    msg = out['plays'][0]['tasks'][0]['hosts'][INJECTED_NAME]['msg']
    assert msg == 'T=%s N=%s' % (INJECTED_TITLE, INJECTED_NAME)
    assert 'uid=' not in json.dumps(out) and '49' not in msg


def test_a_vm_name_holding_jinja_never_runs_on_the_controller(fleet, host_conns, tmp_path):
    """Issue 24: inventory_hostname, compose and keyed_groups on the name, and a connection with no ansible_host, read and from the cache."""
    marker = tmp_path / 'evaluated'
    define(host_conns[0], HOSTILE_NAME)
    try:
        path = write_config(str(tmp_path / 'hostile.converge_libvirt.yml'), [fleet[0].uri], compose={'composed_name': 'inventory_hostname'},
                            keyed_groups=[{'key': 'inventory_hostname', 'prefix': 'byname'}], cache=True, cache_plugin='ansible.builtin.jsonfile',
                            cache_connection=str(tmp_path / 'cache'), cache_timeout=3600)
        play = write_name_probe_play(str(tmp_path / 'hostile.yml'))
        env = {'ANSIBLE_INVENTORY_ENABLED': 'converge.virt.libvirt', 'CONVERGE_TEST_MARKER': str(marker)}
        for run in ('read from libvirt', 'served from the cache'):
            _rc, out = run_playbook(play, env=env, inventory=path, limit='inj-*')
            assert not marker.exists(), '%s: the VM name was evaluated on the controller' % run
            tasks = task_results(out)
            msg = tasks['templates'][HOSTILE_NAME]['msg']
            name, composed, groups = msg.split('|')
            assert name == HOSTILE_NAME and composed == HOSTILE_NAME, (run, msg)
            assert [g for g in groups.split(',') if g.startswith('byname_')] == [re.sub(r'\W', '_', 'byname_' + HOSTILE_NAME)], msg
            assert tasks['connects'][HOSTILE_NAME].get('unreachable'), (run, 'the connection to the name was tried', tasks['connects'])
        data, _stderr = inventory_list(path)
        assert 'ansible_host' not in data['_meta']['hostvars'][HOSTILE_NAME]
    finally:
        domains.remove_domain(host_conns[0], HOSTILE_NAME)


def test_cache_and_unreachable_host(libvirt_hosts, virtlab_layout, tmp_path):
    state_dir = str(tmp_path / 'lab2')
    extra = virtlab_hosts.start_hosts(1, state_dir, **virtlab_layout(2))
    try:
        conn = libvirt.open(extra[0].uri)
        define(conn, 'inv-far', start=True)
        conn.close()
        path = write_config(str(tmp_path / 'cached.converge_libvirt.yml'), [libvirt_hosts[0].uri, extra[0].uri], cache=True,
                            cache_plugin='ansible.builtin.jsonfile', cache_connection=str(tmp_path / 'cache'), cache_timeout=3600)
        first, _stderr = inventory_list(path)
        assert first['_meta']['hostvars']['inv-far']['status'] == 'Running'
        conn = libvirt.open(extra[0].uri)
        define(conn, 'inv-late')
        conn.close()
        second, _stderr = inventory_list(path)
        assert 'inv-late' not in second['_meta']['hostvars'], 'the second run must be served from the cache'
    finally:
        virtlab_hosts.stop_hosts(state_dir)
    third, stderr = flushed_hostvars(path, 'converge.virt.libvirt')
    assert stderr.count('cannot reach') == 1, stderr
    far = third['inv-far']
    assert far['status'] == 'Unknown' and far['stale'] is True
    assert third['inv-run']['status'] == 'Running', 'the reachable host is unaffected'
