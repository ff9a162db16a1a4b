"""The user guide's claims, run: docs/guide.md's examples as real playbooks, and the words check mode predicts.

Every ```yaml block of the guide is preceded by a marker: ``<!-- example: libvirt -->`` or ``<!-- example: kubevirt -->``
(run here) or ``<!-- example: not run (reason) -->``. The marked blocks of a backend run, in the guide's order and exactly
as written (parsed, never edited as text), as the tasks of one play whose ``module_defaults`` give the connection (the
lab's URI; ``K8S_AUTH_KUBECONFIG`` for kubevirt) and whose variables give the site values the examples name
(``hv2_uri``, ``hypervisors``, ``data_pool_path``, ``my_vms``). Every converge.virt task's result is then compared with its
module's RETURN (parsed with yaml): each key a result carries is documented, and each documented ``returned: always``
key is there, down through ``contains``. One libvirt lab (the session's two private hosts; TCG guests, see below) and the
real Kubernetes stack (``kube_server``: kube-apiserver, etcd, KubeVirt's virt-api) serve the file.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import functools
import importlib
import os
import re
import shutil
import tempfile
import time
import xml.etree.ElementTree as ET

import libvirt
import pytest
import yaml

from tests.integration.ansible_run import ROOT, ok, run_module, run_playbook
from tools.virtlab import hosts as virtlab_hosts

GUIDE = os.path.join(ROOT, 'docs', 'guide.md')
MARKED = re.compile(r'^<!-- example: (libvirt|kubevirt|not run \([^)]+\)) -->\n```yaml\n(.*?)^```', re.S | re.M)
# what ansible adds to every result (not the module's RETURN)
ANSIBLE_KEYS = ('changed', 'failed', 'msg', 'invocation', 'diff', 'warnings', 'deprecations', 'skipped', 'skip_reason', '_rc', '_stderr')
VOLUME_OPS = ('detach_live', 'detach_config', 'delete_volume', 'create_volume', 'grow_volume', 'attach_config', 'attach_live')
SNAPSHOT_OPS = ('create_snapshot', 'delete_snapshot', 'restore_snapshot')
LIBVIRT_VMS = ('web-1', 'app-1', 'app-2', 'app-3', 'fleet-1', 'fleet-2')


def guide_examples():
    """([(backend or 'not run (...)', [task, ...])] of the guide's marked yaml blocks in order, [unmarked yaml blocks])."""
    with open(GUIDE, encoding='utf-8') as handle:
        text = handle.read()
    marked = [(mark, yaml.safe_load(block)) for mark, block in MARKED.findall(text)]
    rest = MARKED.sub('', text)
    return marked, re.findall(r'^```yaml\n(.*?)^```', rest, re.S | re.M)


def _uses_the_collection(block):
    """True for a block of tasks or plays that calls a module or role of the collection."""
    text = yaml.safe_dump(list(yaml.safe_load_all(block)))
    return 'converge.virt.' in text and not text.startswith(('- plugin:', '- sources:'))


def module_return(module):
    return yaml.safe_load(importlib.import_module('ansible_collections.converge.virt.plugins.modules.' + module).RETURN)


def undocumented(result, doc, where, top=True):
    """Keys of ``result`` that ``doc`` (a RETURN mapping) does not document, and documented always-returned keys it lacks."""
    problems = []
    for key, value in result.items():
        if key.startswith('_ansible') or (top and key in ANSIBLE_KEYS):
            continue
        if key not in doc:
            problems.append('%s.%s is returned but not documented' % (where, key))
            continue
        contains = doc[key].get('contains')
        if contains and isinstance(value, dict):
            problems += undocumented(value, contains, where + '.' + key, False)
        elif contains and isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    problems += undocumented(item, contains, '%s.%s[%d]' % (where, key, index), False)
    for key, spec in doc.items():
        if spec.get('returned') == 'always' and key not in result:
            problems.append('%s.%s is documented as always returned but missing' % (where, key))
    return problems


def run_examples(backend, module_defaults, variables, tmp_path, env=None):
    """Run the guide's examples of ``backend`` as one play; [(module, task, result)] of the converge.virt tasks."""
    examples, _unmarked = guide_examples()
    tasks = [task for mark, block in examples if mark == backend for task in block]
    assert tasks, 'the guide has no %s example' % backend
    play = tmp_path / ('guide-%s.yml' % backend)
    play.write_text(yaml.safe_dump([{'name': 'guide examples (%s)' % backend, 'hosts': 'localhost', 'gather_facts': False,
                                     'module_defaults': module_defaults, 'vars': variables, 'tasks': tasks}], sort_keys=False))
    started = time.monotonic()
    _rc, out = run_playbook(str(play), env=env)
    print('%s examples: %d tasks in %.1f s' % (backend, len(tasks), time.monotonic() - started))
    ran = dict((entry['task']['name'], entry['hosts']['localhost']) for entry in out['plays'][0]['tasks'])
    done = []
    for task in tasks:
        module = next(key for key in task if key.startswith(('converge.virt.', 'ansible.builtin.')))
        assert task['name'] in ran, 'the example %r did not run (an earlier one failed?): %s' % (task['name'], out['stats'])
        result = ran[task['name']]
        assert not result.get('failed'), 'the guide example %r failed: %s' % (task['name'], result.get('msg') or result)
        done.append((module.split('.')[-1] if module.startswith('converge.virt.') else None, task, result))
    return done


def check_returns(done):
    problems = []
    for module, task, result in done:
        if module:
            problems += undocumented(result, module_return(module), '%s %r: ' % (module, task['name']) + module)
    problems = sorted(set(re.sub(r'\[\d+\]', '[]', problem) for problem in problems))
    assert not problems, '\n'.join(problems)


def test_every_yaml_example_of_the_guide_is_marked():
    examples, unmarked = guide_examples()
    missing = [block for block in unmarked if _uses_the_collection(block)]
    assert not missing, 'a ```yaml block of docs/guide.md that uses the collection needs an <!-- example: ... --> line right above it:\n%s' % missing
    assert sum(1 for mark, _b in examples if mark == 'libvirt') >= 8 and sum(1 for mark, _b in examples if mark == 'kubevirt') >= 3


def _pool_xml(name, path):
    pool = ET.Element('pool', type='dir')
    ET.SubElement(pool, 'name').text = name
    ET.SubElement(ET.SubElement(pool, 'target'), 'path').text = path
    return ET.tostring(pool, encoding='unicode')


def _volume_xml(name, capacity, fmt):
    vol = ET.Element('volume')
    ET.SubElement(vol, 'name').text = name
    ET.SubElement(vol, 'capacity').text = str(capacity)
    ET.SubElement(ET.SubElement(vol, 'target'), 'format', type=fmt)
    return ET.tostring(vol, encoding='unicode')


def _network_xml(name, bridge):
    """An isolated network without addresses (no dnsmasq): a bridge in the lab's namespace."""
    net = ET.Element('network')
    ET.SubElement(net, 'name').text = name
    ET.SubElement(net, 'bridge', name=bridge)
    return ET.tostring(net, encoding='unicode')


def _remove_libvirt(conns, pools):
    for conn in conns:
        for name in LIBVIRT_VMS:
            try:
                dom = conn.lookupByName(name)
            except libvirt.libvirtError:
                continue
            if dom.isActive():
                dom.destroy()
            dom.undefine()
        for name in pools:
            try:
                pool = conn.storagePoolLookupByName(name)
            except libvirt.libvirtError:
                continue
            if pool.isActive():
                for vol in pool.listAllVolumes(0):
                    vol.delete(0)
                pool.destroy()
            pool.undefine()
        try:
            net = conn.networkLookupByName('default')
            if net.isActive():
                net.destroy()
            net.undefine()
        except libvirt.libvirtError:
            pass


def test_libvirt_examples_run_and_return_what_is_documented(libvirt_hosts, tmp_path):
    hv1, hv2 = libvirt_hosts[:2]
    conns = [libvirt.open(hv1.uri), libvirt.open(hv2.uri)]
    images = tempfile.mkdtemp(prefix='guide-images-')
    try:
        # what the examples take for granted on a hypervisor: the pool 'default' with web-1's root disk, the network 'default'
        pool = conns[0].storagePoolDefineXML(_pool_xml('default', images), 0)
        pool.create(0)
        pool.createXML(_volume_xml('web-1-root.qcow2', 64 * 1024 * 1024, 'qcow2'), 0)
        for index, conn in enumerate(conns):
            conn.networkDefineXML(_network_xml('default', 'guidebr%d' % index)).create()
        # TCG, not KVM: the guide's VMs have a network interface, and on this machine's nested KVM the NIC's boot ROM
        # (iPXE, real mode) stops a diskless guest within seconds with "KVM internal error. Suberror: 1" (seen in the qemu
        # log of app-1); its live migration then fails at the target's `cont` ("Resetting the Virtual Machine is required")
        defaults = {'group/converge.virt.libvirt': {'uri': hv1.uri},
                    'converge.virt.vm': {'domain_type': 'qemu', 'shutdown_timeout': 1}}
        variables = {'hv2_uri': hv2.uri, 'hypervisors': [hv1.uri, hv2.uri], 'data_pool_path': str(tmp_path / 'data'),
                     'my_vms': [{'name': 'fleet-1', 'memory': '64MiB', 'state': 'stopped'}, {'name': 'fleet-2', 'memory': '64MiB', 'state': 'present'}]}
        done = run_examples('libvirt', defaults, variables, tmp_path)
        check_returns(done)
        by_name = dict((task['name'], result) for _m, task, result in done)
        # the guide's words about the results
        vol = by_name['A data volume in a directory pool, plugged into web-1 (hot-plugged when it runs)']
        assert [op['op'] for op in vol['operations']] == ['create_volume', 'attach_config', 'attach_live'], vol['operations']
        grown = by_name['Grow it later (online through the running guest; a smaller size is refused)']
        assert [op['op'] for op in grown['operations']] == ['grow_volume'], grown['operations']
        assert all(op['op'] in VOLUME_OPS for _m, _t, r in done for op in r.get('operations') or [])
        web1 = by_name['Define and start a VM']['vm']
        assert (web1['vm_state'], web1['power_state'], web1['status']) == ('ACTIVE', 'RUNNING', 'Running')
        fleet = by_name['Three small VMs, all running (top-level options are every item\'s defaults)']
        assert sorted((r['name'], r['vm']['status']) for r in fleet['results']) == [('app-1', 'Running'), ('app-2', 'Running'), ('app-3', 'Stopped')]
        info = by_name['Who uses what']
        assert info['volumes'][0]['used_by'] == ['web-1'], info['volumes']
        moved = by_name['Live-migrate app-1 from hv1 to hv2 and wait']
        assert moved['phases'][-1] == 'Succeeded', moved
    finally:
        _remove_libvirt(conns, ('default', 'data'))
        for conn in conns:
            conn.close()
        shutil.rmtree(images, ignore_errors=True)


def test_kubevirt_examples_run_and_return_what_is_documented(kube_server, tmp_path):
    srv = kube_server     # the real stack (kube-apiserver, etcd, KubeVirt's virt-api)
    env = {'K8S_AUTH_KUBECONFIG': srv.kubeconfig_path}
    # what the examples take for granted in namespace demo: web-1's data claim, a second VM for the node drain
    ok(run_module('volume', {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': 'demo', 'name': 'web-1-data', 'capacity': '1Gi'}))
    ok(run_module('vm', {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': 'demo', 'name': 'web-2', 'memory': '64Mi',
                         'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}], 'state': 'running', 'wait_timeout': 60}))
    defaults = dict(('converge.virt.' + module, {'wait_timeout': 60}) for module in ('vm', 'volume', 'migration'))
    done = run_examples('kubevirt', defaults, {}, tmp_path, env=env)
    check_returns(done)
    by_name = dict((task['name'], result) for _m, task, result in done)
    web1 = by_name['A KubeVirt VM from a container disk, with a data disk on a claim, running']['vm']
    assert (web1['status'], web1['printable_status'], web1['run_strategy']) == ('Running', 'Running', 'Always'), web1
    attached = by_name['A claim in namespace demo, hot-plugged into the running VM web-1']
    assert [op['op'] for op in attached['operations']] == ['create_volume', 'attach_config', 'attach_live'], attached['operations']
    assert all(op['op'] in VOLUME_OPS + SNAPSHOT_OPS for _m, _t, r in done for op in r.get('operations') or [])
    snap = by_name['Snapshot a KubeVirt VM, keeping its newest five snapshots']
    assert [op['op'] for op in snap['operations']] == ['create_snapshot'] and snap['snapshot']['phase'] == 'Ready', snap
    listed = by_name['Every VirtualMachineSnapshot of the namespace, oldest first, with its phase']
    assert [(s['name'], s['phase']) for s in listed['snapshots']] == [('nightly-1', 'Ready')], listed


WORDS = ('exists', 'vm_state', 'power_state', 'task_state', 'status', 'phase')


def _libvirt_vm(host, name, state):
    return {'uri': host.uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(), 'shutdown_timeout': 1,
            'state': state}


def _kubevirt_vm(srv, name, state):
    return {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': 'default', 'name': name, 'memory': '64Mi', 'wait_timeout': 60,
            'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}], 'state': state}


SEQUENCES = {
    'libvirt': ('present', 'running', 'paused', 'running', 'suspended', 'running', 'restarted', 'stopped', 'absent'),
    'kubevirt': ('present', 'running', 'paused', 'stopped', 'running', 'restarted', 'absent'),
}


@pytest.mark.parametrize('backend', ['libvirt', 'kubevirt'])
def test_check_mode_predicts_every_word_a_real_run_reports(backend, request):
    """The guide: --check shows the VM a real run leaves - every word predicted, what was observed in ``observed``."""
    if backend == 'libvirt':
        args = functools.partial(_libvirt_vm, request.getfixturevalue('libvirt_hosts')[0], 'guide-check')
    else:
        args = functools.partial(_kubevirt_vm, request.getfixturevalue('kube_server'), 'guide-check')
    previous = None
    for state in SEQUENCES[backend]:
        checked = ok(run_module('vm', args(state), check=True))
        real = ok(run_module('vm', args(state)))
        assert checked['changed'] and checked['steps'] == real['steps'], (state, checked['steps'], real['steps'])
        predicted = checked['vm']
        for word in WORDS:
            if word == 'phase' and predicted['phase'] is None and predicted['power_state'] == 'SHUTDOWN':
                continue    # a stopped guest's final phase depends on how it stopped: not predicted (documented)
            assert predicted[word] == real['vm'][word], (backend, state, word, predicted, real['vm'])
        # what was observed comes back apart, untouched
        if previous is not None:
            assert dict((w, checked['observed'][w]) for w in WORDS) == previous, (state, checked['observed'])
        assert checked['diff']['before']['vm_state'] == checked['observed']['vm_state']
        previous = dict((w, real['vm'][w]) for w in WORDS)
