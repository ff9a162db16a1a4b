"""AWX without AWX: a job and an inventory sync run the way AWX runs them, against a private libvirt host.

The job: ansible-runner (AWX's job runner) with a private data dir laid out as AWX lays it out - env/envvars,
env/extravars, inventory/hosts, project/ - runs playbooks/reconcile.yml (converge.virt.reconcile) on a VM destroyed
behind the collection's back. The credential is the custom credential type of docs/examples/awx-credential-types.yml,
read from that file and injected as AWX injects a custom credential (env, file and extra_vars injectors rendered with
the credential's inputs; ``tower.filename`` the files written): the host's URI reaches the job only through the
injected environment. The job events give the per-task ok/changed/failed counts AWX shows, which must agree with the
play's stats; a planted SASL password and SSH key (credential inputs) appear in no event, no artifact file and no
stdout, at AWX's default verbosity and at -vvv. With a qemu+ssh URI, the key file the credential's file injector
writes is the one ssh is given (a stand-in ssh on the job's PATH records its arguments).

The inventory syncs: ``ansible-inventory -i <source> --list --export --output <file>`` as AWX's inventory update runs
it, with the credential's injected environment only (AWX gives an inventory update no extra variables) and source files
that name no host: converge.virt.libvirt with the custom credential (its URI; with a qemu+ssh URI its key file reaches
ssh), converge.virt.kubevirt with AWX's own Kubernetes bearer-token credential on the real API stack (server, token and
CA from the environment, no kubeconfig). The VMs' state words and readiness are listed; neither the planted secrets nor
the token are in the output, stdout, stderr or the inventory cache.
"""

# pylint: disable=redefined-outer-name

import collections
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

import jinja2
import jinja2.meta
import libvirt
import pytest
import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tests.integration.ansible_run import BIN, ROOT, ok, run_module, run_playbook
from tests.kubeapi.fixtures import kube_server  # noqa: F401 pylint: disable=unused-import
from tools.virtlab import hosts as virtlab_hosts

if os.environ.get('CONVERGE_VIRT_REQUIRE_PEERS'):    # `make integration` installed it: missing is a failure there
    import ansible_runner  # noqa: E402 pylint: disable=wrong-import-position,import-error
else:
    ansible_runner = pytest.importorskip('ansible_runner', reason='needs ansible-runner (test-requirements.txt)')

CREDENTIAL_TYPES = os.path.join(ROOT, 'docs', 'examples', 'awx-credential-types.yml')
CREDENTIAL_TYPE = 'converge.virt libvirt host'
RECONCILE_TASK = 'Compare vm_state with power_state and look for stale tasks'


@pytest.fixture(scope='module')
def host(tmp_path_factory, virtlab_layout):
    state_dir = str(tmp_path_factory.mktemp('awxlab'))
    started = virtlab_hosts.start_hosts(1, state_dir, **virtlab_layout(3))
    try:
        yield started[0]
    finally:
        virtlab_hosts.stop_hosts(state_dir)


def small(host, name, **extra):
    return dict({'uri': host.uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(),
                 'shutdown_timeout': 0}, **extra)


def credential_type(name):
    """The credential type ``name`` of docs/examples/awx-credential-types.yml."""
    with open(CREDENTIAL_TYPES, encoding='utf-8') as handle:
        types = yaml.safe_load(handle)
    found = [item for item in types if item['name'] == name]
    assert len(found) == 1, [item['name'] for item in types]
    return found[0]


def inject(ctype, inputs, private_data_dir):
    """(env, extra_vars) of a credential of ``ctype`` with ``inputs``, injected as AWX does it.

    AWX (awx/main/models/credential.py, CredentialType.inject_credential): the file injectors are rendered first
    (``template`` or ``template.<name>``), each written to a file of its own under the private data dir, mode 0600;
    then env and extra_vars are rendered in a sandbox with the inputs and ``tower.filename`` (a string for one file,
    ``tower.filename.<name>`` for named ones).
    """
    fields = {field['id'] for field in ctype['inputs']['fields']}
    assert set(inputs) <= fields, sorted(set(inputs) - fields)
    assert set(ctype['inputs'].get('required', ())) <= set(inputs)
    sandbox = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    injectors = ctype['injectors']
    files = {}
    for key, template in sorted((injectors.get('file') or {}).items()):
        path = os.path.join(private_data_dir, 'env', 'cred_' + key.replace('.', '_'))
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), 'w', encoding='utf-8') as handle:
            handle.write(sandbox.from_string(template).render(**inputs))
        files[key.partition('.')[2] or None] = path
    filename = files[None] if list(files) == [None] else {name: path for name, path in files.items() if name}
    namespace = dict(inputs, tower={'filename': filename}, awx={'filename': filename})
    env = {key: sandbox.from_string(value).render(**namespace) for key, value in (injectors.get('env') or {}).items()}
    extra_vars = {key: sandbox.from_string(value).render(**namespace) for key, value in (injectors.get('extra_vars') or {}).items()}
    return env, extra_vars


def test_the_credential_type_puts_no_secret_in_the_environment():
    # ansible-runner keeps the job's whole environment in artifacts/<id>/command (and AWX shows a job's environment):
    # a secret input may reach the job as a file or an extra variable, never through an env injector
    ctype = credential_type(CREDENTIAL_TYPE)
    secret = {field['id'] for field in ctype['inputs']['fields'] if field.get('secret')}
    assert secret, 'the credential type declares no secret input'
    sandbox = ImmutableSandboxedEnvironment()
    for name, template in ctype['injectors'].get('env', {}).items():
        used = jinja2.meta.find_undeclared_variables(sandbox.parse(template))
        assert not used & secret, (name, sorted(used & secret))


def planted():
    """Credential inputs holding secrets that must never be shown: a fake SASL password and a fake SSH key."""
    password = 'fake-sasl-' + secrets.token_hex(12)
    key_body = secrets.token_hex(24)
    key = '-----BEGIN OPENSSH PRIVATE KEY-----\n%s\n-----END OPENSSH PRIVATE KEY-----\n' % key_body
    return {'sasl_username': 'awx-job', 'sasl_password': password, 'ssh_key_data': key}, (password, key_body)


def private_data_dir(tmp_path, host, job_extra_vars, uri=None):
    """An AWX-style private data dir for playbooks/reconcile.yml; returns (path, the planted secrets)."""
    pdd = os.path.join(str(tmp_path), 'pdd')
    for sub in ('env', 'inventory', 'project'):
        os.makedirs(os.path.join(pdd, sub))
    shutil.copy(os.path.join(ROOT, 'playbooks', 'reconcile.yml'), os.path.join(pdd, 'project', 'reconcile.yml'))
    inputs, hidden = planted()
    env, cred_vars = inject(credential_type(CREDENTIAL_TYPE), dict(inputs, uri=uri or host.uri), pdd)
    collections_path = os.path.join(ROOT, 'build', 'collections')
    # AWX's job environment: the credential's env, and where the collections are (AWX: ANSIBLE_COLLECTIONS_PATHS)
    envvars = dict(env, ANSIBLE_COLLECTIONS_PATH=collections_path, PATH=BIN + os.pathsep + os.environ.get('PATH', ''),
                   ANSIBLE_NOCOLOR='1', ANSIBLE_LOCALHOST_WARNING='0')
    with open(os.path.join(pdd, 'env', 'envvars'), 'w', encoding='utf-8') as handle:
        yaml.safe_dump(envvars, handle)
    with open(os.path.join(pdd, 'env', 'extravars'), 'w', encoding='utf-8') as handle:
        yaml.safe_dump(dict(job_extra_vars, **cred_vars), handle)
    with open(os.path.join(pdd, 'inventory', 'hosts'), 'w', encoding='utf-8') as handle:
        yaml.safe_dump({'all': {'hosts': {'localhost': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}}, handle)
    return pdd, hidden


def task_counts(events):
    """{task name: Counter(ok, changed, failed, skipped)} from runner's job events (what AWX shows per task)."""
    counts = collections.defaultdict(collections.Counter)
    for event in events:
        kind = event.get('event', '')
        data = event.get('event_data', {})
        if kind in ('runner_on_ok', 'runner_on_failed', 'runner_on_skipped', 'runner_on_unreachable'):
            counts[data['task']][kind[len('runner_on_'):]] += 1
            if kind == 'runner_on_ok' and data.get('res', {}).get('changed'):
                counts[data['task']]['changed'] += 1
    return counts


def leaks(root, texts, hidden):
    """(where, secret) of every secret of ``hidden`` found in a file under ``root`` or in one of ``texts``."""
    found = []
    for directory, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, 'rb') as handle:
                data = handle.read()
            found += [(path, secret) for secret in hidden if secret.encode() in data]
    for where, text in texts.items():
        found += [(where, secret) for secret in hidden if secret in text]
    return found


@pytest.mark.parametrize('verbosity', [0, 3])
def test_a_job_as_awx_runs_it_reconciles_with_the_injected_credential_and_shows_no_secret(host, tmp_path, verbosity):
    name = 'awx-%d' % verbosity
    ok(run_module('vm', small(host, name, state='running')))
    conn = libvirt.open(host.uri)
    try:
        conn.lookupByName(name).destroy()  # behind the collection's back: recorded ACTIVE, not running
        pdd, hidden = private_data_dir(tmp_path, host, {'vm_name': name})
        # the URI reaches the job only through the credential's environment
        with open(os.path.join(pdd, 'env', 'extravars'), encoding='utf-8') as handle:
            assert host.uri not in handle.read()
        result = ansible_runner.run(private_data_dir=pdd, playbook='reconcile.yml', verbosity=verbosity, quiet=True)
        events = list(result.events)
        stdout = result.stdout.read()
        assert (result.status, result.rc) == ('successful', 0), stdout[-4000:]
        assert conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_RUNNING

        counts = task_counts(events)
        assert counts[RECONCILE_TASK] == collections.Counter(ok=1, changed=1), counts
        assert not [task for task, count in counts.items() if count['failed'] or count['unreachable']], counts
        # the per-task counts of the job events agree with the play's stats (AWX's host summary)
        stats = result.stats
        assert sum(count['ok'] for count in counts.values()) == stats['ok']['localhost'], (counts, stats)
        assert sum(count['changed'] for count in counts.values()) == stats['changed']['localhost'], (counts, stats)
        assert not stats['failures'] and not stats['dark'], stats

        assert leaks(os.path.join(pdd, 'artifacts'), {'stdout': stdout, 'events': json.dumps(events)}, hidden) == []
        assert os.listdir(os.path.join(pdd, 'artifacts')), 'runner wrote no artifacts'
    finally:
        conn.close()
        run_module('vm', small(host, name, state='absent'))


def test_the_ssh_key_of_the_credential_reaches_ssh_for_a_qemu_ssh_uri(host, tmp_path):
    # libvirt runs the ssh of PATH: a stand-in records its arguments and fails, so the job fails after ssh was asked
    pdd, hidden = private_data_dir(tmp_path, host, {'vm_name': 'awx-ssh'}, uri='qemu+ssh://nobody@hv1.invalid/system')
    fake_bin, record = fake_ssh(tmp_path)
    envvars_path = os.path.join(pdd, 'env', 'envvars')
    with open(envvars_path, encoding='utf-8') as handle:
        envvars = yaml.safe_load(handle)
    envvars['PATH'] = fake_bin + os.pathsep + envvars['PATH']
    with open(envvars_path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump(envvars, handle)
    with open(os.path.join(pdd, 'env', 'extravars'), encoding='utf-8') as handle:
        keyfile = yaml.safe_load(handle)['converge_virt_libvirt_keyfile']
    with open(keyfile, encoding='utf-8') as handle:
        assert hidden[1] in handle.read(), 'the file injector did not write the key'

    result = ansible_runner.run(private_data_dir=pdd, playbook='reconcile.yml', quiet=True)
    events = list(result.events)
    stdout = result.stdout.read()
    assert result.status == 'failed', stdout[-3000:]
    failed = [event['event_data'] for event in events if event.get('event') == 'runner_on_failed']
    assert [data['task'] for data in failed] == [RECONCILE_TASK], stdout[-3000:]
    assert 'cannot connect to qemu+ssh://nobody@hv1.invalid/system?keyfile=' in failed[0]['res']['msg'], failed[0]['res']['msg']
    with open(record, encoding='utf-8') as handle:
        argv = json.load(handle)
    assert '-i' in argv and argv[argv.index('-i') + 1] == keyfile, argv
    assert leaks(os.path.join(pdd, 'artifacts'), {'stdout': stdout, 'events': json.dumps(events)}, hidden) == []


def fake_ssh(tmp_path):
    """A stand-in ssh that records its arguments in the returned file and fails (libvirt runs the ssh of PATH)."""
    fake_bin = os.path.join(str(tmp_path), 'bin')
    os.makedirs(fake_bin)
    record = os.path.join(str(tmp_path), 'ssh-argv.json')
    with open(os.path.join(fake_bin, 'ssh'), 'w', encoding='utf-8') as handle:
        handle.write('#!%s\nimport json, sys\nwith open(%r, "w") as out:\n    json.dump(sys.argv[1:], out)\nsys.exit(255)\n' % (sys.executable, record))
    os.chmod(os.path.join(fake_bin, 'ssh'), 0o755)
    return fake_bin, record


def inventory_sync(tmp_path, source, env, hidden):
    """``ansible-inventory -i <source> --list --export --output <file>`` as AWX's inventory update runs it, with ``env``
    (the credential's injected environment) and a private inventory cache; returns (the inventory, stderr). Fails when a
    secret of ``hidden`` is in the output, stdout, stderr or the cache."""
    out = os.path.join(str(tmp_path), 'out')
    os.makedirs(out)
    output = os.path.join(out, 'inventory.json')
    cache = os.path.join(str(tmp_path), 'cache')
    cmd = [os.path.join(BIN, 'ansible-inventory'), '-i', source, '--list', '--export', '--output', output]
    proc = subprocess.run(cmd, env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, 'build', 'collections'), ANSIBLE_INVENTORY_CACHE='true',
                                        ANSIBLE_INVENTORY_CACHE_PLUGIN='ansible.builtin.jsonfile', ANSIBLE_INVENTORY_CACHE_CONNECTION=cache, **env),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(output, encoding='utf-8') as handle:
        # as AWX reads it back: values marked unsafe stay so ({"__ansible_unsafe": ...} on recent ansible-core)
        listed = json.load(handle, object_hook=lambda obj: obj['__ansible_unsafe'] if list(obj) == ['__ansible_unsafe'] else obj)
    assert os.listdir(cache), 'the inventory cache was not written'
    assert leaks(out, {'stdout': proc.stdout, 'stderr': proc.stderr}, hidden) == [] and leaks(cache, {}, hidden) == []
    return listed, proc.stderr


def libvirt_source_with_credential(tmp_path, uri):
    """AWX's inventory update of a libvirt source: (source file, env the credential injects, planted secrets).

    The source file is the project's and names no URI; the credential attached to the source gives ``uri`` (an
    inventory update gets the credential's env only, not its extra vars).
    """
    source = os.path.join(str(tmp_path), 'lab.converge_libvirt.yml')
    with open(source, 'w', encoding='utf-8') as handle:
        yaml.safe_dump({'plugin': 'converge.virt.libvirt'}, handle)
    pdd = os.path.join(str(tmp_path), 'inv')
    os.makedirs(os.path.join(pdd, 'env'))
    inputs, hidden = planted()
    env, _extra_vars = inject(credential_type(CREDENTIAL_TYPE), dict(inputs, uri=uri), pdd)
    return source, env, hidden


def test_an_inventory_sync_as_awx_runs_it_takes_the_host_from_the_credential(host, tmp_path):
    ok(run_module('vm', small(host, 'awx-inv', state='running')))
    ok(run_module('vm', small(host, 'awx-inv-off', state='running')))
    ok(run_module('vm', small(host, 'awx-inv-off', state='stopped')))
    try:
        source, env, hidden = libvirt_source_with_credential(tmp_path, host.uri)
        assert env['LIBVIRT_DEFAULT_URI'] == host.uri and not host.uri.startswith('qemu+ssh')
        listed, _stderr = inventory_sync(tmp_path, source, env, hidden)
        hostvars = listed['_meta']['hostvars']
        assert (hostvars['awx-inv']['vm_state'], hostvars['awx-inv']['power_state']) == ('ACTIVE', 'RUNNING'), hostvars['awx-inv']
        assert (hostvars['awx-inv-off']['vm_state'], hostvars['awx-inv-off']['power_state']) == ('STOPPED', 'SHUTDOWN'), hostvars['awx-inv-off']
        assert hostvars['awx-inv']['libvirt_uri'] == host.uri      # the credential's URI, without the key file
        assert hostvars['awx-inv']['readiness'] == 'running' and 'readiness' not in hostvars['awx-inv-off'], hostvars
        assert 'awx-inv' in listed['vm_state_active']['hosts'] and 'awx-inv-off' in listed['vm_state_stopped']['hosts'], listed
    finally:
        for name in ('awx-inv', 'awx-inv-off'):
            run_module('vm', small(host, name, state='absent'))


def test_an_inventory_sync_of_a_qemu_ssh_credential_gives_ssh_its_key(tmp_path):
    # the same credential with a qemu+ssh URI: its key file reaches ssh (a stand-in that fails: the host is left out
    # with one warning and the sync succeeds, as an unreachable host does)
    uri = 'qemu+ssh://nobody@hv1.invalid/system'
    source, env, hidden = libvirt_source_with_credential(tmp_path, uri)
    fake_bin, record = fake_ssh(tmp_path)
    env['PATH'] = fake_bin + os.pathsep + os.environ.get('PATH', '')
    listed, stderr = inventory_sync(tmp_path, source, env, hidden)
    assert not listed['_meta']['hostvars'], listed
    assert 'cannot reach %s' % uri in ' '.join(stderr.split()), stderr
    with open(record, encoding='utf-8') as handle:
        argv = json.load(handle)
    keyfile = env['CONVERGE_VIRT_LIBVIRT_KEYFILE']
    assert '-i' in argv and argv[argv.index('-i') + 1] == keyfile, argv
    with open(keyfile, encoding='utf-8') as handle:
        assert hidden[1] in handle.read(), 'the file injector did not write the key'


def inject_kubernetes_bearer_token(inputs, private_data_dir):
    """The env AWX's managed "OpenShift or Kubernetes API Bearer Token" credential injects (awx/main/models/credential/
    injectors.py, kubernetes_bearer_token): host and token always; with verify_ssl and a CA, that CA in a file of the
    private data dir (0600) and K8S_AUTH_VERIFY_SSL 'True', else 'False'."""
    env = {'K8S_AUTH_HOST': inputs['host'], 'K8S_AUTH_API_KEY': inputs['bearer_token']}
    if inputs.get('verify_ssl') and 'ssl_ca_cert' in inputs:
        env['K8S_AUTH_VERIFY_SSL'] = 'True'
        handle, path = tempfile.mkstemp(dir=private_data_dir)
        with os.fdopen(handle, 'w') as out:
            os.chmod(path, 0o600)
            out.write(inputs['ssl_ca_cert'])
        env['K8S_AUTH_SSL_CA_CERT'] = path
    else:
        env['K8S_AUTH_VERIFY_SSL'] = 'False'
    return env


def test_a_kubevirt_inventory_sync_as_awx_runs_it_with_the_bearer_token_credential(kube_server, tmp_path, monkeypatch):
    srv = kube_server
    # one VM, running, as the vm module reports it once it has an address (a stopped one's words: test_inventory_kubevirt)
    made = ok(run_module('vm', dict(backend='kubevirt', kubeconfig=srv.kubeconfig_path, namespace='default', wait_timeout=60, name='awx-kv',
                                    vcpus=1, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}],
                                    state='running', wait_for='address')))['vm']
    token = srv.add_token('awx-inventory-token', ['*'])
    pdd = os.path.join(str(tmp_path), 'inv')
    os.makedirs(pdd)
    env = inject_kubernetes_bearer_token({'host': srv.url, 'bearer_token': token, 'verify_ssl': True, 'ssl_ca_cert': srv.ca_pem.decode()}, pdd)
    # no kubeconfig either: the source file names the namespace only, the server and the identity are the credential's
    home = os.path.join(str(tmp_path), 'home')
    os.makedirs(home)
    env.update(HOME=home, KUBECONFIG=os.path.join(home, 'none'))
    for name in ('K8S_AUTH_KUBECONFIG', 'K8S_AUTH_CONTEXT'):
        monkeypatch.delenv(name, raising=False)
    source = os.path.join(str(tmp_path), 'vms.converge_kubevirt.yml')
    with open(source, 'w', encoding='utf-8') as handle:
        yaml.safe_dump({'plugin': 'converge.virt.kubevirt', 'namespaces': ['default']}, handle)
    listed, stderr = inventory_sync(tmp_path, source, env, [token])
    hostvars = listed['_meta']['hostvars']
    assert 'in-cluster' not in stderr, stderr
    assert list(hostvars) == ['default-awx-kv'] and hostvars['default-awx-kv']['status'] == 'Running', hostvars
    # readiness and ansible_host as the vm module reported them for the same VM (wait_for: address)
    assert (made['readiness'], made['address']) == ('address', hostvars['default-awx-kv']['ansible_host']), made
    assert hostvars['default-awx-kv']['readiness'] == 'address', hostvars['default-awx-kv']


def defaults_play(checks):
    """A play that loads the three roles' defaults files (as the roles do) and asserts ``checks`` on them; then, with the
    backends switched to kubevirt, that no libvirt URI is taken from the environment for reconcile and evacuate."""
    defaults = [{'name': 'Defaults of %s' % role, 'ansible.builtin.include_vars': os.path.join(ROOT, 'roles', role, 'defaults', 'main.yml')}
                for role in ('lifecycle', 'reconcile', 'evacuate')]
    return {'hosts': 'localhost', 'gather_facts': False, 'tasks': defaults + [
        {'name': 'With the libvirt backends', 'ansible.builtin.assert': {'that': checks, 'quiet': True}},
        {'name': 'Switch to kubevirt', 'ansible.builtin.set_fact': {'reconcile_backend': 'kubevirt', 'evacuate_backend': 'kubevirt'}},
        {'name': 'With the kubevirt backends', 'ansible.builtin.assert': {'that': ["reconcile_uri == ''", "evacuate_uri == ''"], 'quiet': True}},
    ]}


def write_plays(path, plays):
    with open(path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump(plays, handle)
    return path


def test_the_roles_take_the_uri_from_the_credentials_environment(host, tmp_path):
    # a job template running converge.virt.lifecycle with the credential attached and no lifecycle_uri; then the three
    # roles' defaults with the variable (its URI, for the libvirt backend only) and without it
    os.makedirs(os.path.join(str(tmp_path), 'env'))
    env, _extra_vars = inject(credential_type(CREDENTIAL_TYPE), dict(planted()[0], uri=host.uri), str(tmp_path))
    lifecycle = {'hosts': 'localhost', 'gather_facts': False, 'roles': [
        {'role': 'converge.virt.lifecycle', 'lifecycle_vms': [{'name': 'awx-role', 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type()}],
         'lifecycle_shutdown_timeout': 0}]}
    conn = libvirt.open(host.uri)
    try:
        checks = ['lifecycle_uri == %r' % host.uri, 'reconcile_uri == %r' % host.uri, 'evacuate_uri == %r' % host.uri]
        rc, data = run_playbook(write_plays(os.path.join(str(tmp_path), 'set.yml'), [lifecycle, defaults_play(checks)]), env=env)
        assert rc == 0, json.dumps(data)[-3000:]
        assert conn.lookupByName('awx-role').state()[0] == libvirt.VIR_DOMAIN_RUNNING
        checks = ["lifecycle_uri == 'qemu:///system'", "reconcile_uri == ''", "evacuate_uri == ''"]
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv('LIBVIRT_DEFAULT_URI', raising=False)
            rc, data = run_playbook(write_plays(os.path.join(str(tmp_path), 'unset.yml'), [defaults_play(checks)]))
        assert rc == 0, json.dumps(data)[-3000:]
    finally:
        conn.close()
        run_module('vm', small(host, 'awx-role', state='absent'))
