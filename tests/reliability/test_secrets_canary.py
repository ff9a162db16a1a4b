"""Secrets canary: a password in libvirt URIs and a Kubernetes API token never show up anywhere.

One playbook passes the canaries through every module (vm, vm_info, volume,
volume_info, migration, migration_info, host, reconcile on libvirt; vm,
vm_info, volume_info, migration_info and host on kubevirt), with happy paths
(the private libvirt hosts accept the URI, the API test server accepts the
canary token), failing tasks (bad input, an unreachable host, a wrong token),
and runs it with ``ansible-playbook -vvv --diff``, then again with
``--check``, logging to ANSIBLE_LOG_PATH.  Both inventory plugins read the
same canaries (one unreachable URI: a warning) through ``ansible-inventory
-vvv --list`` and the playbook runs.  The canaries must never appear in
stdout, stderr, the results, the log file, the inventory cache, or any other
file the runs wrote (every file under the run's directories is scanned; only
the input files written by the test itself are skipped).
"""

# pylint: disable=redefined-outer-name

import json
import os
import subprocess

import libvirt
import pytest
import yaml

from ansible_collections.converge.virt.plugins.modules import vm as vm_module

from tests.integration.ansible_run import BIN, ansible_env
from tests.reliability import figures
from tests.reliability.fuzzing import run_main
from tools.virtlab import domains

CANARY_PW = 'CanaryPw-3e7b19d4f0'          # in the userinfo of every libvirt URI
CANARY_PW_PARAM = 'CanaryPwParam-a81f60c2'  # the password option
CANARY_TOKEN = 'canary-token-9c41d7e2b5'   # the Kubernetes API token (accepted by the test server)
WRONG_TOKEN = 'canary-wrong-44e1b7a0c9'    # a token the server refuses
CANARIES = (CANARY_PW, CANARY_PW_PARAM, CANARY_TOKEN, WRONG_TOKEN)
VM = 'canary-vm'
INV_VM = 'canary-inv'
POOL = 'canarypool'
NS = 'default'
# the tasks run again in check mode: changes (vm, volume, host, kubevirt vm) and failures (bad input, unreachable, wrong token)
CHECK_MODE_TASKS = (0, 3, 6, 12, 13, 23, 29)


def tcp_uri(host, port=None):
    return 'qemu+tcp://someone:%s@%s:%d/system' % (CANARY_PW, host.address, port or host.tcp_port)


@pytest.fixture
def lab(libvirt_hosts, kube_server, tmp_path):
    """Input files, output directories and the environment of one canary run."""
    srv = kube_server
    srv.add_token(CANARY_TOKEN, ['*'])
    dirs = dict((name, tmp_path / name) for name in ('input', 'out', 'home', 'tmp', 'cache', 'pool'))
    for path in dirs.values():
        path.mkdir()
    (dirs['input'] / 'ca.pem').write_bytes(srv.ca_pem)
    # a VM on each side for the inventories to list (the playbook makes and removes its own)
    conn = libvirt.open(libvirt_hosts[0].uri)
    conn.defineXML(domains.diskless_domain_xml(INV_VM))
    conn.close()
    made = run_main(vm_module, {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'name': INV_VM, 'memory': '64Mi',
                                'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}], 'state': 'present'})
    assert made.get('changed'), made
    env = ansible_env({'ANSIBLE_STDOUT_CALLBACK': 'default', 'ANSIBLE_LOG_PATH': str(dirs['out'] / 'ansible.log'), 'ANSIBLE_HOME': str(dirs['home']),
                       'HOME': str(dirs['home']), 'ANSIBLE_LOCAL_TEMP': str(dirs['tmp']), 'ANSIBLE_REMOTE_TEMP': str(dirs['tmp']),
                       'TMPDIR': str(dirs['tmp']), 'ANSIBLE_INVENTORY_CACHE': '1', 'ANSIBLE_INVENTORY_CACHE_PLUGIN': 'ansible.builtin.jsonfile',
                       'ANSIBLE_INVENTORY_CACHE_CONNECTION': str(dirs['cache']), 'ANSIBLE_FORKS': '2'})
    env.pop('K8S_AUTH_API_KEY', None)
    yield {'hosts': libvirt_hosts, 'srv': srv, 'dirs': dirs, 'env': env, 'ca': str(dirs['input'] / 'ca.pem')}
    for host in libvirt_hosts:
        other = libvirt.open(host.uri)
        for name in (VM, INV_VM):
            try:
                dom = other.lookupByName(name)
                if dom.isActive():
                    dom.destroy()
                dom.undefine()
            except libvirt.libvirtError:
                pass
        other.close()
    conn = libvirt.open(libvirt_hosts[0].uri)
    try:
        pool = conn.storagePoolLookupByName(POOL)
        for vol in pool.listAllVolumes(0):
            vol.delete(0)
        pool.destroy()
        pool.undefine()
    except libvirt.libvirtError:
        pass
    conn.close()


def tasks(lab):
    """(module, args, expected outcome 'ok' / 'failed' / 'any') of every task of the playbook."""
    src, dst = lab['hosts']
    uri, uri2, dead = tcp_uri(src), tcp_uri(dst), tcp_uri(src, port=1)
    kube = {'backend': 'kubevirt', 'host': lab['srv'].url, 'api_key': CANARY_TOKEN, 'ca_cert': lab['ca'], 'namespace': NS}
    pool_path = str(lab['dirs']['pool'])
    vm = {'uri': uri, 'name': VM, 'memory': '64MiB', 'domain_type': 'qemu', 'title': 'canary'}
    return [
        ('vm', dict(vm, state='present'), 'ok'),
        ('vm', dict(vm, state='present', username='someone', password=CANARY_PW_PARAM, title='canary two'), 'ok'),
        ('vm_info', {'uri': uri, 'name': [VM]}, 'ok'),
        ('volume', {'uri': uri, 'pool': POOL, 'pool_path': pool_path, 'name': 'canary.raw', 'capacity': '1MiB'}, 'ok'),
        ('volume', {'uri': uri, 'pool': POOL, 'name': 'canary.raw', 'capacity': '2MiB', 'attachments': [{'vm': VM, 'dev': 'vdb'}]}, 'ok'),
        ('volume_info', {'uri': uri, 'pool': POOL}, 'ok'),
        ('host', {'uri': uri2, 'state': 'drained', 'reason': 'canary'}, 'ok'),
        ('host', {'uri': uri2, 'state': 'active'}, 'ok'),
        ('migration_info', {'uri': uri, 'uris': [uri2, dead]}, 'ok'),
        ('migration', {'uri': uri, 'target_uri': uri2, 'name': VM, 'mode': 'offline', 'target_password': CANARY_PW_PARAM}, 'ok'),
        ('migration', {'uri': uri2, 'target_uri': uri, 'name': VM, 'mode': 'offline'}, 'ok'),
        ('reconcile', {'uri': uri, 'name': [VM]}, 'ok'),
        # failing tasks: bad input, unreachable hosts, a refused transition
        ('vm', dict(vm, memory='lots'), 'failed'),
        ('vm', dict(vm, uri=dead, password=CANARY_PW_PARAM), 'failed'),
        ('vm', dict(vm, state='paused'), 'failed'),
        ('vm_info', {'uri': dead}, 'failed'),
        ('volume', {'uri': dead, 'pool': POOL, 'name': 'canary.raw', 'capacity': '1MiB'}, 'failed'),
        ('volume_info', {'uri': dead}, 'failed'),
        ('host', {'uri': dead, 'password': CANARY_PW_PARAM}, 'failed'),
        ('migration', {'uri': uri, 'target_uri': dead, 'name': 'canary-missing'}, 'failed'),
        ('migration_info', {'uri': dead}, 'failed'),
        ('reconcile', {'uri': dead}, 'failed'),
        ('volume', {'uri': uri, 'pool': POOL, 'name': 'canary.raw', 'state': 'absent'}, 'failed'),   # in use: refused
        # kubevirt
        ('vm', dict(kube, name=VM, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}], state='running',
                    wait_timeout=60), 'ok'),
        ('vm_info', dict(kube), 'ok'),
        ('volume_info', dict(kube), 'ok'),
        ('migration_info', dict(kube), 'ok'),
        ('host', dict(((k, v) for k, v in kube.items() if k != 'namespace'), node='node01'), 'ok'),
        ('vm', dict(kube, name=VM, state='suspended'), 'failed'),
        ('vm', dict(kube, name=VM, api_key=WRONG_TOKEN), 'failed'),
        ('vm', dict(kube, name=VM, host='https://127.0.0.1:1'), 'failed'),
        ('vm_info', dict(kube, api_key=WRONG_TOKEN), 'failed'),
        ('vm', dict(kube, name=VM, state='absent', wait_timeout=60), 'ok'),
        # clean up the libvirt side (the playbook leaves the world as it found it)
        ('volume', {'uri': uri, 'pool': POOL, 'name': 'canary.raw', 'attachments': []}, 'ok'),
        ('vm', {'uri': uri, 'name': VM, 'state': 'absent'}, 'ok'),
        ('volume', {'uri': uri, 'pool': POOL, 'name': 'canary.raw', 'state': 'absent'}, 'ok'),
    ]


def write_inputs(lab):
    """The playbook and the two inventory files (in input/, which the scan skips); returns (playbook, inventories, task list)."""
    src, dst = lab['hosts']
    listed = tasks(lab)
    out = lab['dirs']['out']
    play_tasks = []
    for index, (module, args, _expect) in enumerate(listed):
        # two pseudo hosts run the libvirt and the kubevirt tasks side by side (strategy free)
        play_tasks.append({'name': '%02d %s' % (index, module), 'converge.virt.' + module: args, 'register': 'r%02d' % index, 'ignore_errors': True,
                           'when': 'inventory_hostname == %r' % ('kv' if args.get('backend') == 'kubevirt' else 'lv'),
                           'tags': ['check'] if index in CHECK_MODE_TASKS else []})
    results = '{{ {%s} | to_json }}' % ', '.join("'r%02d': (r%02d | default({'skipped': true}))" % (i, i) for i in range(len(listed)))
    dest = str(out / 'results-{{ run }}-{{ inventory_hostname }}.json')
    play_tasks.append({'name': 'save the results', 'ansible.builtin.copy': {'content': results, 'dest': dest, 'mode': '0600'}, 'check_mode': False,
                       'tags': ['always']})
    playbook = lab['dirs']['input'] / 'canary.yml'
    playbook.write_text(yaml.safe_dump([{'name': 'canary', 'hosts': 'lv:kv', 'connection': 'local', 'gather_facts': False, 'strategy': 'free',
                                         'tasks': play_tasks}], sort_keys=False))
    libvirt_inv = lab['dirs']['input'] / 'canary.converge_libvirt.yml'
    libvirt_inv.write_text(yaml.safe_dump({'plugin': 'converge.virt.libvirt', 'uris': [tcp_uri(src), tcp_uri(dst), tcp_uri(src, port=1)],
                                           'cache': True}))
    kube_inv = lab['dirs']['input'] / 'canary.converge_kubevirt.yml'
    kube_inv.write_text(yaml.safe_dump({'plugin': 'converge.virt.kubevirt', 'host': lab['srv'].url, 'api_key': CANARY_TOKEN, 'ca_cert': lab['ca'],
                                        'namespaces': [NS], 'cache': True}))
    wrong_inv = lab['dirs']['input'] / 'wrong.converge_kubevirt.yml'
    wrong_inv.write_text(yaml.safe_dump({'plugin': 'converge.virt.kubevirt', 'host': lab['srv'].url, 'api_key': WRONG_TOKEN, 'ca_cert': lab['ca'],
                                         'namespaces': [NS]}))
    return playbook, [libvirt_inv, kube_inv, wrong_inv], listed


def run(cmd, lab):
    proc = subprocess.run(cmd, env=lab['env'], capture_output=True, text=True, timeout=900, check=False, cwd=str(lab['dirs']['out']))
    return proc


def scan_files(root, skip):
    """(path, canary) for every file under ``root`` (except under ``skip``) that holds a canary; and how many files were read."""
    found, count = [], 0
    for base, _dirs, files in os.walk(str(root)):
        if base.startswith(str(skip)):
            continue
        for name in files:
            path = os.path.join(base, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            count += 1
            with open(path, 'rb') as stream:
                data = stream.read()
            found += [(path, c) for c in CANARIES if c.encode() in data]
    return found, count


def test_canaries_never_appear_in_any_output(lab):
    playbook, inventories, listed = write_inputs(lab)
    leaks, checks = [], 0

    def check_text(what, text):
        nonlocal checks
        checks += 1
        leaks.extend((what, c) for c in CANARIES if c in text)

    # the inventory plugins on their own (one unreachable libvirt URI: a warning; a wrong token: a failed source)
    for inventory in inventories:
        proc = run([os.path.join(BIN, 'ansible-inventory'), '-vvv', '-i', str(inventory), '--list'], lab)
        check_text('ansible-inventory %s stdout' % inventory.name, proc.stdout)
        check_text('ansible-inventory %s stderr' % inventory.name, proc.stderr)
        if inventory.name == 'canary.converge_libvirt.yml':
            assert 'WARNING' in proc.stderr and 'cannot reach' in proc.stderr, proc.stderr[-2000:]
        if inventory.name.startswith('canary.'):
            assert proc.returncode == 0 and INV_VM in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]

    outcomes = {}
    for run_name, extra in (('apply', ['--diff']), ('check', ['--check', '--diff', '--tags', 'check'])):
        cmd = [os.path.join(BIN, 'ansible-playbook'), '-vvv', '-i', 'lv,kv,'] + sum((['-i', str(i)] for i in inventories[:2]), []) + \
              [str(playbook), '-e', json.dumps({'run': run_name})] + extra
        proc = run(cmd, lab)
        check_text('%s stdout' % run_name, proc.stdout)
        check_text('%s stderr' % run_name, proc.stderr)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        results = {}
        for side in ('lv', 'kv'):
            text = (lab['dirs']['out'] / ('results-%s-%s.json' % (run_name, side))).read_text()
            check_text('%s results' % run_name, text)
            results.update((k, v) for k, v in json.loads(text).items() if not v.get('skipped'))
        outcomes[run_name] = results

    # the happy paths really ran and the failing tasks really failed (else the test would prove nothing)
    for index, (module, args, expect) in enumerate(listed):
        result = outcomes['apply']['r%02d' % index]
        if expect == 'ok':
            assert not result.get('failed'), (index, module, result.get('msg'))
        elif expect == 'failed':
            assert result.get('failed'), (index, module, result)
    assert outcomes['apply']['r00']['changed'] and outcomes['apply']['r23']['changed']
    assert sorted(outcomes['check']) == ['r%02d' % i for i in sorted(CHECK_MODE_TASKS)]
    assert outcomes['check']['r00']['changed'] and outcomes['check']['r23']['changed'] and outcomes['check']['r12']['failed']
    assert any(r.get('diff') for r in outcomes['apply'].values())
    # the lab was left as it was found, and check mode changed nothing
    for host in lab['hosts']:
        conn = libvirt.open(host.uri)
        names = [d.name() for d in conn.listAllDomains(0)]
        conn.close()
        assert VM not in names, host.name

    found, files = scan_files(lab['dirs']['out'].parent, lab['dirs']['input'])
    leaks.extend(found)
    assert (lab['dirs']['out'] / 'ansible.log').stat().st_size > 0
    assert files > 3
    for name, value in (('libvirt host files', h.root) for h in lab['hosts']):
        found, _count = scan_files(value, '/nonexistent')
        leaks.extend((name + ': ' + p, c) for p, c in found)
    checks += files
    figures.record('secrets', 'canary password and token through every module and both inventory plugins (-vvv, log, --diff, --check, errors, '
                   'warnings)', survived=not leaks, count=checks, detail='%d modules, %d tasks, %d files scanned' % (
                       len(set(m for m, _a, _e in listed)), len(listed) + len(CHECK_MODE_TASKS), files))
    assert not leaks, leaks
