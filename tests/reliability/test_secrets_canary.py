"""Secrets canary: passwords in libvirt URIs, Kubernetes API tokens and secrets inside declarations never show up anywhere.

One playbook passes the canaries through every module (vm, vm_info, volume,
volume_info, migration, migration_info, host, reconcile on libvirt; vm,
vm_info, volume, volume_info, migration_info and host on kubevirt) and the
three roles (reconcile, evacuate and lifecycle, with their password and
api_key options), with happy paths (the private libvirt hosts accept the URI,
the API test server accepts the canary tokens), failing tasks (bad input, an
unreachable host, a wrong token, a role's failing verification), and runs it
with ``ansible-playbook -vvv --diff``, then again with ``--check``, logging to
ANSIBLE_LOG_PATH.  The canaries sit in the userinfo and in a ``?password=``
query of libvirt URIs, in the password and api_key options, in cloud-init
``userData`` of a KubeVirt spec (changed once, so the change shows both), and
in the user:password of DataVolume import URLs (``volume`` import_from and
``dataVolumeTemplates``).  ``playbooks/report.yml`` runs on the same URIs (one
host without VMs) and writes its HTML.  Both inventory plugins read the same
canaries (one unreachable URI: a warning) through ``ansible-inventory -vvv
--list`` and the playbook runs.  The modules' journal goes to a stand-in
(a ``systemd.journal`` stub first on the modules' PYTHONPATH that writes each
entry to a file), so what AnsibleModule logs on the managed host is read too.
The canaries must never appear in stdout, stderr, the results, the log file,
the journal stand-in, the HTML report, the inventory cache, or any other file
the runs wrote (every file under the run's directories is scanned; only the
input files written by the test itself are skipped).
"""

# pylint: disable=redefined-outer-name

import json
import os
import subprocess

import libvirt
import pytest
import yaml

from ansible_collections.converge.virt.plugins.modules import vm as vm_module

from tests.integration.ansible_run import ANSIBLE_CORE, BIN, ROOT, ansible_env
from tests.reliability import figures
from tests.reliability.fuzzing import run_main
from tools.virtlab import domains

CANARY_PW = 'CanaryPw-3e7b19d4f0'          # in the userinfo of every libvirt URI
CANARY_PW_PARAM = 'CanaryPwParam-a81f60c2'  # the password option
CANARY_TOKEN = 'canary-token-9c41d7e2b5'   # the Kubernetes API token (accepted by the test server)
WRONG_TOKEN = 'canary-wrong-44e1b7a0c9'    # a token the server refuses
CANARY_QUERY = 'CanaryQueryPw-5d0e9b71'     # a ?password= query value of libvirt URIs
CANARY_USERDATA = 'CanaryUserData-7f2c4a19'   # in the cloud-init userData of a KubeVirt spec
CANARY_USERDATA2 = 'CanaryUserData-b40e1d63'  # ... of the changed declaration (the change shows before and after)
CANARY_DV_PW = 'CanaryDvPw-2b8e5c07'        # user:password of DataVolume import URLs
CANARY_DV_PW2 = 'CanaryDvPw-90ad17f4'       # ... of the changed declaration
CANARY_ROLE_PW = 'CanaryRolePw-6c3f0a92'    # the roles' password options
CANARY_ROLE_TOKEN = 'canary-role-token-d15e8b3a'  # the roles' api_key options (accepted by the test server)
# secrets that reach failing tasks only through variables (ansible-core 2.19 prints a failing task's source lines: only the
# variable's name is written there): a vault-encrypted vars file, extra vars from a file, the controller's environment
CANARY_VAULT_PW = 'CanaryVaultPw-0f5c2e81'   # in URIs of the vaulted vars file
CANARY_EXTRA_PW = 'CanaryExtraPw-7a93d146'   # the password options, from -e @file
CANARY_ENV_TOKEN = 'canary-env-token-3b6d90f2'  # api_key from lookup('env') (refused by the server)
CANARIES = (CANARY_PW, CANARY_PW_PARAM, CANARY_TOKEN, WRONG_TOKEN, CANARY_QUERY, CANARY_USERDATA, CANARY_USERDATA2, CANARY_DV_PW,
            CANARY_DV_PW2, CANARY_ROLE_PW, CANARY_ROLE_TOKEN, CANARY_VAULT_PW, CANARY_EXTRA_PW, CANARY_ENV_TOKEN)
VAR_MODULES = ('vm', 'vm_info', 'volume', 'volume_info', 'migration', 'migration_info', 'host', 'reconcile')
KUBE_VAR_MODULES = ('vm', 'vm_info', 'volume', 'volume_info', 'migration', 'migration_info', 'host')
VM = 'canary-vm'
CI_VM = 'canary-ci'       # a KubeVirt VM with cloud-init and a DataVolume template
LC_VM = 'canary-lc'       # the lifecycle role's VM (both backends)
INV_VM = 'canary-inv'
POOL = 'canarypool'
NS = 'default'
# the tasks run again in check mode: changes (vm, volume, host, kubevirt vm, a VM with cloud-init, a DataVolume import) and
# failures (bad input, unreachable, wrong token)
CHECK_MODE_TASKS = (0, 3, 6, 12, 13, 23, 29, 40, 44)


def tcp_uri(host, port=None):
    return 'qemu+tcp://someone:%s@%s:%d/system' % (CANARY_PW, host.address, port or host.tcp_port)


def query_uri(host, port=None):
    """A URI with a password in its userinfo and in its query (libvirt passes unknown query parameters on)."""
    return tcp_uri(host, port) + '?password=' + CANARY_QUERY


def cloud_init_spec(user_data):
    """A VirtualMachine spec passthrough with a cloud-init disk whose user data holds ``user_data``."""
    return {'template': {'spec': {'domain': {'devices': {'disks': [{'name': 'ci', 'disk': {'bus': 'virtio'}}]}},
                                  'volumes': [{'name': 'ci', 'cloudInitNoCloud': {'userData': '#cloud-config\npassword: %s\n' % user_data}}]}}}


def import_url(password):
    return 'https://someone:%s@images.example/fedora-40.qcow2' % password


def dv_template(password):
    """A DataVolume template importing from a URL with ``password``."""
    return {'metadata': {'name': CI_VM + '-root'},
            'spec': {'source': {'http': {'url': import_url(password)}}, 'storage': {'resources': {'requests': {'storage': '1Gi'}}}}}


# a systemd.journal stand-in for the modules: basic.py logs there when it imports and systemd "booted"
JOURNAL_STUB = {
    '__init__.py': '',
    'daemon.py': 'def booted():\n    return True\n',
    'journal.py': (
        'import json\nimport os\n\n\n'
        'def send(**fields):\n'
        '    path = os.environ.get("CONVERGE_TEST_JOURNAL")\n'
        '    if path:\n'
        '        with open(path, "a", encoding="utf-8") as stream:\n'
        '            stream.write(json.dumps(fields, default=str) + "\\n")\n\n\n'
        'def sendv(*fields):\n'
        '    send(**dict(f.split("=", 1) for f in fields))\n'),
}


@pytest.fixture
def lab(libvirt_hosts, kube_emulator, tmp_path):
    """Input files, output directories and the environment of one canary run.

    The emulator (kube_emulator): the canaries are strings this file chooses and plants everywhere (the API token among
    them), and a real API server accepts only tokens it minted or read from its token file at start.
    """
    srv = kube_emulator
    srv.add_token(CANARY_TOKEN, ['*'])
    srv.add_token(CANARY_ROLE_TOKEN, ['*'])
    dirs = dict((name, tmp_path / name) for name in ('input', 'out', 'home', 'tmp', 'cache', 'pool'))
    for path in dirs.values():
        path.mkdir()
    (dirs['input'] / 'ca.pem').write_bytes(srv.ca_pem)
    stub = dirs['input'] / 'journal_stub' / 'systemd'
    stub.mkdir(parents=True)
    for name, text in JOURNAL_STUB.items():
        (stub / name).write_text(text)
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
                       'ANSIBLE_INVENTORY_CACHE_CONNECTION': str(dirs['cache']), 'ANSIBLE_FORKS': '2',
                       'CONVERGE_TEST_JOURNAL': str(dirs['out'] / 'journal.jsonl')})
    env['PYTHONPATH'] = os.pathsep.join(p for p in (str(dirs['input'] / 'journal_stub'), env.get('PYTHONPATH')) if p)
    env['CANARY_ENV_TOKEN'] = CANARY_ENV_TOKEN
    env['ANSIBLE_VAULT_PASSWORD_FILE'] = str(dirs['input'] / 'vault-pass')
    env.pop('K8S_AUTH_API_KEY', None)
    yield {'hosts': libvirt_hosts, 'srv': srv, 'dirs': dirs, 'env': env, 'ca': str(dirs['input'] / 'ca.pem')}
    for host in libvirt_hosts:
        other = libvirt.open(host.uri)
        for name in (VM, INV_VM, LC_VM):
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
    uri, uri2, dead, quri = tcp_uri(src), tcp_uri(dst), tcp_uri(src, port=1), query_uri(src)
    kube = {'backend': 'kubevirt', 'host': lab['srv'].url, 'api_key': CANARY_TOKEN, 'ca_cert': lab['ca'], 'namespace': NS}

    def role_kube(role, host_key=None):
        """A role's kubevirt connection variables, with the role's token."""
        prefix = role + '_'
        return {prefix + 'backend': 'kubevirt', host_key or prefix + 'host': lab['srv'].url, prefix + 'api_key': CANARY_ROLE_TOKEN,
                prefix + 'ca_cert': lab['ca'], prefix + 'namespace': NS}
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
        # a ?password= in the query of the URI (reaches the module's first log line before anything else)
        ('vm_info', {'uri': quri}, 'ok'),
        ('host', {'uri': quri}, 'ok'),
        ('vm_info', {'uri': query_uri(src, port=1)}, 'failed'),
        ('migration_info', {'uri': quri, 'uris': [query_uri(dst), query_uri(src, port=1)]}, 'ok'),
        # secrets inside KubeVirt declarations: cloud-init user data, DataVolume import URLs with user:password
        ('vm', dict(kube, name=CI_VM, memory='64Mi', spec=cloud_init_spec(CANARY_USERDATA), state='present',
                    data_volume_templates=[dv_template(CANARY_DV_PW)]), 'ok'),
        ('vm', dict(kube, name=CI_VM, memory='64Mi', spec=cloud_init_spec(CANARY_USERDATA2), state='present',
                    data_volume_templates=[dv_template(CANARY_DV_PW2)]), 'ok'),
        ('vm', dict(kube, name=CI_VM, memory='lots', spec=cloud_init_spec(CANARY_USERDATA)), 'failed'),
        ('vm', dict(kube, name=CI_VM, state='absent', delete_volumes=True, wait_timeout=60), 'ok'),
        ('volume', dict(kube, name='canary-dv', import_from=import_url(CANARY_DV_PW), capacity='1Gi', wait_timeout=60), 'ok'),
        ('volume', dict(kube, name='canary-dv', state='absent', wait_timeout=60), 'ok'),
        ('volume', dict(kube, name='canary-dv2', import_from='ftp://someone:%s@images.example/x.img' % CANARY_DV_PW2, capacity='1Gi'), 'failed'),
        # the roles with their password and api_key options (a role's task result is not registered: 'role')
        ('role:lifecycle', {'lifecycle_uri': quri, 'lifecycle_username': 'someone', 'lifecycle_password': CANARY_ROLE_PW,
                            'lifecycle_vms': [{'name': LC_VM, 'memory': '64MiB', 'domain_type': 'qemu', 'state': 'stopped'}]}, 'role'),
        ('role:lifecycle', {'lifecycle_uri': quri, 'lifecycle_password': CANARY_ROLE_PW, 'lifecycle_state': 'absent',
                            'lifecycle_vms': [{'name': LC_VM}]}, 'role'),
        ('role:reconcile', {'reconcile_uri': quri, 'reconcile_password': CANARY_ROLE_PW}, 'role'),
        # fails verifying: the stopped VM cannot move to an unreachable host (the failure message names the host)
        ('role:evacuate', {'evacuate_uri': quri, 'evacuate_password': CANARY_ROLE_PW, 'evacuate_target_uris': [query_uri(dst, port=1)],
                           'evacuate_wait_timeout': 30}, 'role'),
        ('host', {'uri': quri, 'state': 'active'}, 'ok'),
        ('role:lifecycle', dict(role_kube('lifecycle'), lifecycle_vms=[{'name': LC_VM, 'memory': '64Mi', 'state': 'stopped',
                                                                        'spec': cloud_init_spec(CANARY_USERDATA)}], lifecycle_wait_timeout=60), 'role'),
        ('role:lifecycle', dict(role_kube('lifecycle'), lifecycle_vms=[{'name': LC_VM}], lifecycle_state='absent', lifecycle_wait_timeout=60), 'role'),
        ('role:reconcile', dict(role_kube('reconcile', host_key='reconcile_host')), 'role'),
        ('role:evacuate', dict(role_kube('evacuate', host_key='evacuate_api_host'), evacuate_node='node01'), 'role'),
        ('host', dict(((k, v) for k, v in kube.items() if k != 'namespace'), node='node01', state='active'), 'ok'),
    ] + var_tasks(lab)


def var_tasks(lab):
    """Failing tasks of every module whose secrets arrive through variables: the vaulted ``vault_dead_uri`` (a password in
    the URI), ``extra_password`` from ``-e @extra.yml`` (the password options), the token from the environment."""
    src = lab['hosts'][0]
    plain_dead = 'qemu+tcp://someone@%s:1/system' % src.address
    kube = {'backend': 'kubevirt', 'host': lab['srv'].url, 'api_key': "{{ lookup('ansible.builtin.env', 'CANARY_ENV_TOKEN') }}",
            'ca_cert': lab['ca'], 'namespace': NS}
    per_module = {
        'vm': {'name': VM, 'memory': '64MiB'}, 'volume': {'pool': POOL, 'name': 'canary.raw', 'capacity': '1MiB'},
        'migration': {'name': VM, 'target_uri': 'qemu+tcp://%s:%d/system' % (lab['hosts'][1].address, lab['hosts'][1].tcp_port)},
        'host': {'state': 'drained', 'reason': 'canary'},
    }
    listed = [(module, dict(per_module.get(module, {}), uri='{{ vault_dead_uri }}'), 'failed') for module in VAR_MODULES]
    listed += [(module, dict(per_module.get(module, {}), uri=plain_dead, password='{{ extra_password }}'), 'failed') for module in VAR_MODULES]
    listed.append(('migration', {'uri': plain_dead, 'password': '{{ extra_password }}', 'name': VM,
                                 'target_uri': plain_dead, 'target_password': '{{ extra_password }}'}, 'failed'))
    kube_args = {'vm': {'name': VM, 'memory': '64Mi', 'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}]},
                 'volume': {'name': 'canary-env', 'capacity': '1Gi'}, 'migration': {'name': VM, 'target_node': 'node02'},
                 'host': {'node': 'node01', 'state': 'drained'}}
    for module in KUBE_VAR_MODULES:
        args = dict(kube, **kube_args.get(module, {}))
        if module == 'host':
            args.pop('namespace')
        listed.append((module, args, 'failed'))
    return listed


def side_of(args):
    """'kv' for a task that talks to the Kubernetes API server, 'lv' for one that talks to libvirt."""
    return 'kv' if any(key.endswith('backend') and value == 'kubevirt' for key, value in args.items()) else 'lv'


def write_inputs(lab):
    """The playbook and the two inventory files (in input/, which the scan skips); returns (playbook, inventories, task list)."""
    src, dst = lab['hosts']
    listed = tasks(lab)
    out = lab['dirs']['out']
    play_tasks = []
    for index, (module, args, _expect) in enumerate(listed):
        # two pseudo hosts run the libvirt and the kubevirt tasks (strategy free); each half of the test limits the run to one
        side = side_of(args)
        if module.startswith('role:'):
            play_tasks.append({'name': '%02d %s' % (index, module), 'ansible.builtin.include_role': {'name': 'converge.virt.' + module[5:],
                                                                                                     'apply': {'ignore_errors': True}},
                               'vars': args, 'when': 'inventory_hostname == %r' % side})
            continue
        play_tasks.append({'name': '%02d %s' % (index, module), 'converge.virt.' + module: args, 'register': 'r%02d' % index, 'ignore_errors': True,
                           'when': 'inventory_hostname == %r' % side, 'tags': ['check'] if index in CHECK_MODE_TASKS else []})
    results = '{{ {%s} | to_json }}' % ', '.join("'r%02d': (r%02d | default({'skipped': true}))" % (i, i) for i in range(len(listed)))
    dest = str(out / 'results-{{ run }}-{{ inventory_hostname }}.json')
    play_tasks.append({'name': 'save the results', 'ansible.builtin.copy': {'content': results, 'dest': dest, 'mode': '0600'}, 'check_mode': False,
                       'tags': ['always']})
    # the secrets of var_tasks: a vault-encrypted vars file and an extra vars file (neither is the playbook)
    (lab['dirs']['input'] / 'vault-pass').write_text('canary vault password\n')
    vaulted = lab['dirs']['input'] / 'secrets.vault.yml'
    vaulted.write_text(yaml.safe_dump({'vault_dead_uri': 'qemu+tcp://someone:%s@%s:1/system' % (CANARY_VAULT_PW, src.address)}))
    proc = subprocess.run([os.path.join(BIN, 'ansible-vault'), 'encrypt', str(vaulted)], env=lab['env'], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and CANARY_VAULT_PW not in vaulted.read_text(), proc.stderr
    (lab['dirs']['input'] / 'extra.yml').write_text(yaml.safe_dump({'extra_password': CANARY_EXTRA_PW}))
    playbook = lab['dirs']['input'] / 'canary.yml'
    playbook.write_text(yaml.safe_dump([{'name': 'canary', 'hosts': 'lv:kv', 'connection': 'local', 'gather_facts': False, 'strategy': 'free',
                                         'vars_files': [str(vaulted)], 'tasks': play_tasks}], sort_keys=False))
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


def task_line(playbook, index):
    """The line of ``playbook`` where task ``index`` starts (ansible's error origin names it)."""
    for number, line in enumerate(playbook.read_text().splitlines(), 1):
        if line.lstrip().startswith('- name: ') and line.split('- name: ', 1)[1].strip("'\"").startswith('%02d ' % index):
            return number
    raise AssertionError('task %d not found in %s' % (index, playbook))


def run(cmd, lab):
    proc = subprocess.run(cmd, env=lab['env'], capture_output=True, text=True, timeout=900, check=False, cwd=str(lab['dirs']['out']))
    # kept with the run's files (scanned with them; read them when an assertion fails)
    runs = sorted(lab['dirs']['out'].glob('run-*.stdout'))
    # (the command line is not written: the report.yml run gets its URIs in -e)
    (lab['dirs']['out'] / ('run-%02d.stdout' % len(runs))).write_text(os.path.basename(cmd[0]) + '\n' + proc.stdout + '\n--- stderr\n' + proc.stderr)
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


def test_canaries_never_appear_libvirt(lab):
    """The libvirt half of the playbook: its tasks and roles, the journal's masked URI query."""
    check_canaries(lab, 'lv')


def check_canaries(lab, side):
    """Run the playbook limited to ``side`` ('lv': the libvirt tasks, 'kv': the KubeVirt ones) with both inventories, then look
    for the canaries everywhere. The halves are two test files (test_secrets_canary_kubevirt.py runs 'kv'), so that two
    pytest-xdist workers run them side by side; together they run every task and check of the playbook. The 'kv' half also
    makes the runs that stand alone (the three inventory files with ansible-inventory, report.yml, the control), which
    balances the halves: the libvirt tasks and roles take longer."""
    playbook, inventories, listed = write_inputs(lab)
    mine = [index for index, (_module, args, _expect) in enumerate(listed) if side_of(args) == side]
    leaks, checks = [], 0

    def check_text(what, text):
        nonlocal checks
        checks += 1
        leaks.extend((what, c) for c in CANARIES if c in text)

    # the inventory plugins on their own (one unreachable libvirt URI: a warning; a wrong token: a failed source)
    for inventory in (inventories if side == 'kv' else []):
        proc = run([os.path.join(BIN, 'ansible-inventory'), '-vvv', '-i', str(inventory), '--list'], lab)
        check_text('ansible-inventory %s stdout' % inventory.name, proc.stdout)
        check_text('ansible-inventory %s stderr' % inventory.name, proc.stderr)
        if inventory.name == 'canary.converge_libvirt.yml':
            assert 'WARNING' in proc.stderr and 'cannot reach' in proc.stderr, proc.stderr[-2000:]
        if inventory.name.startswith('canary.'):
            assert proc.returncode == 0 and INV_VM in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]

    outcomes, origins = {}, ''
    for run_name, extra in (('apply', ['--diff']), ('check', ['--check', '--diff', '--tags', 'check'])):
        # both inventory plugins read their canaries in every run, whichever half runs
        cmd = [os.path.join(BIN, 'ansible-playbook'), '-vvv', '-i', 'lv,kv,'] + sum((['-i', str(i)] for i in inventories[:2]), []) + \
              [str(playbook), '--limit', side, '-e', json.dumps({'run': run_name}), '-e', '@' + str(lab['dirs']['input'] / 'extra.yml')] + extra
        proc = run(cmd, lab)
        check_text('%s stdout' % run_name, proc.stdout)
        check_text('%s stderr' % run_name, proc.stderr)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        origins += '\n'.join(line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith('Origin: '))
        if run_name == 'apply':
            # every role ran with its secrets (argument validation, the modules, the evacuate role's failing verification)
            for role in ('lifecycle', 'reconcile', 'evacuate'):
                assert "Validating arguments against arg spec 'main'" in proc.stdout and 'converge.virt.%s : ' % role in proc.stdout, role
            if side == 'lv':
                assert 'still holds' in proc.stdout and 'canary-lc: Stopped' in proc.stdout, proc.stdout[-3000:]
        text = (lab['dirs']['out'] / ('results-%s-%s.json' % (run_name, side))).read_text()
        check_text('%s results' % run_name, text)
        outcomes[run_name] = dict((k, v) for k, v in json.loads(text).items() if not v.get('skipped'))
        assert not (lab['dirs']['out'] / ('results-%s-%s.json' % (run_name, 'kv' if side == 'lv' else 'lv'))).exists(), 'the other half ran'

    # the happy paths really ran and the failing tasks really failed (else the test would prove nothing)
    first_var_task = len(listed) - len(var_tasks(lab))
    for index in range(first_var_task, len(listed)):
        if index not in mine:
            continue
        assert outcomes['apply']['r%02d' % index].get('failed'), (index, listed[index][0], outcomes['apply']['r%02d' % index])
        if ANSIBLE_CORE >= (2, 19):
            # ansible printed each failing task's origin (its source lines): the secret was not there because it came through a variable
            assert 'Origin: %s:%d:' % (playbook, task_line(playbook, index)) in origins, (index, origins[-2000:])
    for index, (module, args, expect) in enumerate(listed):
        if expect == 'role' or index not in mine:
            continue
        result = outcomes['apply']['r%02d' % index]
        if expect == 'ok':
            assert not result.get('failed'), (index, module, result.get('msg'))
        elif expect == 'failed':
            assert result.get('failed'), (index, module, result)
    assert sorted(outcomes['check']) == ['r%02d' % i for i in sorted(CHECK_MODE_TASKS) if i in mine]
    assert any(r.get('diff') for r in outcomes['apply'].values())
    if side == 'lv':
        assert outcomes['apply']['r00']['changed']
        assert outcomes['check']['r00']['changed'] and outcomes['check']['r12']['failed']
        # the lab was left as it was found, and check mode changed nothing
        for host in lab['hosts']:
            conn = libvirt.open(host.uri)
            names = [d.name() for d in conn.listAllDomains(0)]
            conn.close()
            assert VM not in names, host.name
    else:
        assert outcomes['apply']['r23']['changed'] and outcomes['check']['r23']['changed']
        # the changed cloud-init declaration was a change, shown masked
        changes = dict((c['path'], c) for c in outcomes['apply']['r41']['changes'])
        assert changes['spec.template.spec.volumes[ci].cloudInitNoCloud.userData']['after'] == '********', changes
        assert outcomes['check']['r40']['changed'] and outcomes['check']['r44']['changed']

    # the journal stand-in got the modules' invocations (else it would prove nothing)
    journal = (lab['dirs']['out'] / 'journal.jsonl').read_text()
    entries = [json.loads(line) for line in journal.splitlines()]
    assert len([e for e in entries if 'Invoked with' in e.get('MESSAGE', '')]) >= len(mine), len(entries)

    if side == 'lv':
        assert any(e.get('URI', '').endswith('?password=********') for e in entries), 'no URI with a query was logged'
    else:
        # the HTML report of playbooks/report.yml: the first host has VMs, the second none (named from its URI)
        src, dst = lab['hosts']
        html = lab['dirs']['out'] / 'report.html'
        proc = run([os.path.join(BIN, 'ansible-playbook'), '-vvv', '-i', os.path.join(ROOT, 'playbooks', 'inventory', 'localhost.yml'),
                    os.path.join(ROOT, 'playbooks', 'report.yml'), '-e', json.dumps({'report_uris': [query_uri(src), query_uri(dst)],
                                                                                     'report_path': str(html)})], lab)
        check_text('report.yml stdout', proc.stdout)
        check_text('report.yml stderr', proc.stderr)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        report = html.read_text()
        assert '<td>%s</td>' % INV_VM in report and 'Host qemu+tcp://%s:%d/system' % (dst.address, dst.tcp_port) in report, report[:3000]

    if side == 'kv' and ANSIBLE_CORE >= (2, 19):
        # the control: a secret written literally in an ad-hoc task's arguments is printed by ansible itself in the error
        # origin, whatever no_log says (the guide's security section) - the same check sees it, so it sees a leak of the others
        literal = 'CanaryLit-5e0a'     # short: ansible elides a long value in the origin
        control = subprocess.run([os.path.join(BIN, 'ansible'), 'localhost', '-c', 'local', '-i', 'localhost,', '-m', 'converge.virt.vm_info', '-a',
                                  json.dumps({'uri': 'qemu+tcp://u:%s@127.0.0.1:1/system' % literal})],
                                 env=dict(lab['env'], CONVERGE_TEST_JOURNAL=''), capture_output=True, text=True, timeout=120, check=False)
        assert control.returncode != 0 and 'Origin: ' in control.stdout + control.stderr and literal in control.stdout + control.stderr, \
            control.stdout[-2000:] + control.stderr[-2000:]

    found, files = scan_files(lab['dirs']['out'].parent, lab['dirs']['input'])
    leaks.extend(found)
    assert (lab['dirs']['out'] / 'ansible.log').stat().st_size > 0
    assert files > 3
    for name, value in (('libvirt host files', h.root) for h in lab['hosts']):
        found, _count = scan_files(value, '/nonexistent')
        leaks.extend((name + ': ' + p, c) for p, c in found)
    checks += files
    what = {'lv': 'libvirt: canary passwords in URIs, their queries and the password options through every module and the roles',
            'kv': 'KubeVirt: canary tokens, cloud-init user data and import URLs through every module and the roles; report.yml and '
                  'both inventory plugins'}[side]
    figures.record('secrets', what + ' (-vvv, log, journal, --diff, --check, errors, warnings)', survived=not leaks, count=checks,
                   detail='%d modules and roles, %d tasks, %d journal entries, %d files scanned' % (
                       len(set(listed[i][0] for i in mine)), len(mine) + len([i for i in CHECK_MODE_TASKS if i in mine]), len(entries), files))
    assert not leaks, leaks
