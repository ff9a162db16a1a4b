"""Event-Driven Ansible end to end: the shipped rulebook (extensions/eda/rulebooks/restart_stopped.yml) under a real
ansible-rulebook (with its Drools engine on Java 17), the collection found through ANSIBLE_COLLECTIONS_PATH only.

A private libvirt host, VMs converged by converge.virt.vm (diskless), then the world changes behind the collection's
back: a VM recorded ACTIVE is destroyed with libvirt; the libvirt_events source says STOPPED (after stopped_delay), the
rule runs converge.virt.reconcile (playbooks/reconcile.yml) for that VM, and the VM runs again. A VM stopped through
the collection (recorded STOPPED) is left alone. A VM destroyed while no rulebook runs is started by the rule on the
source's initial sync.

Issue 33, on every ansible-core the collection claims (the playbook runs with that version's ansible-playbook, found
first on PATH as ansible-runner looks for it): VMs created by converge.virt.vm whose names carry template expressions
that would create a marker file if evaluated are destroyed; the rule fires for each (by its UUID), each runs again,
and the marker is never written.
"""

# pylint: disable=redefined-outer-name

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import libvirt
import pytest
import yaml

from tests.integration.ansible_run import BIN, ROOT, ok, run_module, run_playbook
from tools import matrix
from tools.virtlab import hosts as virtlab_hosts

RULEBOOK = 'converge.virt.restart_stopped'
STOPPED_DELAY = 2
DEADLINE = 120.0  # seconds from the destroy to the VM running again (JVM start excluded: the rulebook is up by then)

# `make integration` (CONVERGE_VIRT_REQUIRE_PEERS=1) installed both: there a missing one fails the tests instead of skipping them
pytestmark = pytest.mark.skipif((shutil.which('ansible-rulebook', path=BIN) is None or shutil.which('java') is None)
                                and not os.environ.get('CONVERGE_VIRT_REQUIRE_PEERS'),
                                reason='needs ansible-rulebook (test-requirements.txt) and Java 17 (openjdk-17-jre-headless)')


@pytest.fixture(scope='module')
def host(tmp_path_factory, virtlab_layout):
    state_dir = str(tmp_path_factory.mktemp('edalab'))
    started = virtlab_hosts.start_hosts(1, state_dir, **virtlab_layout(3))
    try:
        yield started[0]
    finally:
        virtlab_hosts.stop_hosts(state_dir)


@pytest.fixture(scope='module')
def conn(host):
    handle = libvirt.open(host.uri)
    try:
        yield handle
    finally:
        handle.close()


def small(host, name, **extra):
    return dict({'uri': host.uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(),
                 'shutdown_timeout': 0}, **extra)


def rulebook_env(ansible_bin=BIN, extra=None):
    """What ansible-rulebook gets: the checkout as converge.virt through ANSIBLE_COLLECTIONS_PATH, ``ansible_bin`` (where
    ansible-runner finds the ansible-playbook it runs) then this venv's commands first on PATH."""
    env = dict(os.environ)
    for key in ('ANSIBLE_STDOUT_CALLBACK', 'ANSIBLE_CALLBACK_PLUGINS'):
        env.pop(key, None)
    collections = os.path.join(ROOT, 'build', 'collections')
    env.update({'ANSIBLE_COLLECTIONS_PATH': collections, 'PYTHONPATH': collections, 'ANSIBLE_NOCOLOR': '1',
                'ANSIBLE_LOCALHOST_WARNING': '0', 'PATH': os.pathsep.join([ansible_bin, BIN, env.get('PATH', '')]),
                'PYTHONUNBUFFERED': '1'})
    env.update(extra or {})
    return env


class Rulebook:
    """An ansible-rulebook process (own process group) running the shipped rulebook; its output goes to a file."""

    def __init__(self, tmp_path, uri, tag, ansible_bin=BIN, env=None, rulebook=RULEBOOK):  # pylint: disable=too-many-arguments
        self.dir = tmp_path
        self.log = os.path.join(str(tmp_path), 'rulebook-%s.log' % tag)
        inventory = os.path.join(str(tmp_path), 'inventory.yml')
        variables = os.path.join(str(tmp_path), 'vars.yml')
        with open(inventory, 'w', encoding='utf-8') as handle:
            localhost = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}
            yaml.safe_dump({'all': {'hosts': {'localhost': localhost}}}, handle)
        with open(variables, 'w', encoding='utf-8') as handle:
            yaml.safe_dump({'libvirt_uri': uri, 'stopped_delay': STOPPED_DELAY}, handle)
        cmd = [os.path.join(BIN, 'ansible-rulebook'), '-r', rulebook, '-i', inventory, '--vars', variables, '--print-events', '-v']
        with open(self.log, 'w', encoding='utf-8') as out:
            # pylint: disable-next=consider-using-with
            self.proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=rulebook_env(ansible_bin, env), stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def output(self):
        with open(self.log, encoding='utf-8', errors='replace') as handle:
            return handle.read()

    def wait_for(self, pattern, timeout=90.0):
        """Wait until the output matches ``pattern`` (a regular expression); the match."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output())
            if found:
                return found
            if self.proc.poll() is not None:
                raise AssertionError('ansible-rulebook ended (rc %s):\n%s' % (self.proc.returncode, self.output()[-4000:]))
            time.sleep(0.3)
        raise AssertionError('ansible-rulebook never printed %r:\n%s' % (pattern, self.output()[-4000:]))

    def stop(self):
        """SIGINT to its process group (as Ctrl-C), SIGKILL after 20 s."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def wait_running(conn, name, timeout):
    """Seconds until domain ``name`` runs again; AssertionError after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_RUNNING:
            return time.monotonic() - start
        time.sleep(0.25)
    raise AssertionError('%s is not running %.0f s after it was destroyed' % (name, timeout))


RUN_BY = re.compile(r"converge\.virt\.reconcile \(([^)]+)\) for VM uuid ([0-9a-f-]{36}) \(ansible-core ([0-9.]+)")


def playbook_runs(rulebook, count, timeout=120.0):
    """[(trigger, VM uuid)] of the reconcile playbook runs, once ``count`` of them have finished (PLAY RECAP)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and rulebook.output().count('PLAY RECAP') < count:
        time.sleep(0.3)
    out = rulebook.output()
    assert out.count('PLAY RECAP') >= count, out[-4000:]
    assert re.search(r'localhost\s+: ok=\d+\s+changed=[1-9]\d*\s+unreachable=0\s+failed=0', out), out[-4000:]
    return [(trigger, uuid) for trigger, uuid, _version in RUN_BY.findall(out)]


def synced(rulebook, name):
    """Wait for the source's initial sync event of VM ``name`` (the source is connected and following events)."""
    rulebook.wait_for(r"'type': 'sync_done'")
    assert re.search(r"'name': '%s'" % re.escape(name), rulebook.output()), rulebook.output()[-3000:]


def test_the_rulebook_restarts_an_active_vm_destroyed_behind_the_collections_back(host, conn, tmp_path):
    for name in ('eda-1', 'eda-off', 'eda-2'):
        ok(run_module('vm', small(host, name, state='running')))
    ok(run_module('vm', small(host, 'eda-off', state='stopped')))  # recorded STOPPED before the rulebook starts: no rule for it
    rulebook = Rulebook(tmp_path, host.uri, 'live')
    try:
        synced(rulebook, 'eda-1')
        # stopped through the collection while the rulebook runs: STOPPED comes, but the record says STOPPED too
        ok(run_module('vm', small(host, 'eda-2', state='stopped')))
        time.sleep(STOPPED_DELAY + 1)
        conn.lookupByName('eda-1').destroy()
        took = wait_running(conn, 'eda-1', DEADLINE)
        # the source held the STOPPED back stopped_delay seconds before the rule could run
        assert took >= STOPPED_DELAY - 0.2, took
        # it was the rule on the lifecycle event that ran the reconcile playbook, once, for that VM alone
        assert playbook_runs(rulebook, 1) == [('lifecycle STOPPED', conn.lookupByName('eda-1').UUIDString())], rulebook.output()[-4000:]
        record = ok(run_module('vm_info', {'uri': host.uri, 'name': 'eda-1'}))
        vm = record['vms'][0]
        assert (vm['vm_state'], vm['power_state'], vm['task_state']) == ('ACTIVE', 'RUNNING', None), vm
        # the VMs the collection stopped are recorded STOPPED: no rule for them
        for name in ('eda-off', 'eda-2'):
            assert conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_SHUTOFF, name
    finally:
        rulebook.stop()
    assert rulebook.proc.returncode is not None

    # destroyed while no rulebook runs: the initial sync says ACTIVE and SHUTDOWN, the second rule starts it
    conn.lookupByName('eda-1').destroy()
    rulebook = Rulebook(tmp_path, host.uri, 'sync')
    try:
        wait_running(conn, 'eda-1', DEADLINE + 60)
        assert playbook_runs(rulebook, 1) == [('sync', conn.lookupByName('eda-1').UUIDString())], rulebook.output()[-4000:]
        for name in ('eda-off', 'eda-2'):
            assert conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_SHUTOFF, name
    finally:
        rulebook.stop()
        for name in ('eda-1', 'eda-off', 'eda-2'):
            run_module('vm', small(host, name, state='absent'))


# ---------------------------------------------------------------------------------------------------- issue 33
# names that, evaluated by ansible-core, create the file $CONVERGE_TEST_MARKER (libvirt accepts any name without '/')
HOSTILE = ("x-{{ lookup('pipe', 'touch $CONVERGE_TEST_MARKER') }}",
           "y-{% if lookup('pipe', 'touch $CONVERGE_TEST_MARKER') %}{% endif %}")


def ansible_bin(version):
    """The directory of the ansible-playbook of ansible-core ``version``: this venv's, or the matrix venv's
    (tools/matrix.py, `make matrix-setup`); None when there is none."""
    out = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '--version'], capture_output=True, text=True, check=True).stdout
    if re.search(r'core (%s)\.' % re.escape(version), out):
        return BIN
    candidate = os.path.join(matrix.venv_home(version), 'bin')
    return candidate if os.path.exists(os.path.join(candidate, 'ansible-playbook')) else None


def create_hostile(tmp_path, host, name):
    """converge.virt.vm creates and starts VM ``name`` (given as !unsafe: this run must not evaluate it either)."""
    play = os.path.join(str(tmp_path), 'hostile.yml')
    args = small(host, '@NAME@', state='running')
    with open(play, 'w', encoding='utf-8') as handle:
        text = yaml.safe_dump([{'hosts': 'localhost', 'gather_facts': False, 'tasks': [{'name': 'create', 'converge.virt.vm': args}]}])
        handle.write(text.replace("'@NAME@'", '!unsafe ' + json.dumps(name)))
    rc, out = run_playbook(play)
    assert rc == 0, json.dumps(out)[-3000:]


@pytest.fixture(scope='module')
def hostile_vms(host, conn, tmp_path_factory):
    """{uuid: name} of the VMs with hostile names, created and started by converge.virt.vm."""
    tmp_path = tmp_path_factory.mktemp('hostile')
    for name in HOSTILE:
        create_hostile(tmp_path, host, name)
    try:
        yield {conn.lookupByName(name).UUIDString(): name for name in HOSTILE}
    finally:
        for name in HOSTILE:
            try:
                dom = conn.lookupByName(name)
                if dom.isActive():
                    dom.destroy()
                dom.undefine()
            except libvirt.libvirtError:
                pass


@pytest.mark.parametrize('version', matrix.VERSIONS)
def test_a_vm_name_with_template_syntax_is_never_evaluated(host, conn, hostile_vms, tmp_path, version):
    where = ansible_bin(version)
    if where is None:
        if os.environ.get('CONVERGE_VIRT_REQUIRE_PEERS'):
            raise AssertionError('ansible-core %s: no matrix environment under %s (make matrix-setup)' % (version, matrix.VENVS))
        pytest.skip('ansible-core %s: no matrix environment (make matrix-setup)' % version)
    marker = tmp_path / 'evaluated'
    rulebook = Rulebook(tmp_path, host.uri, 'hostile-' + version, ansible_bin=where, env={'CONVERGE_TEST_MARKER': str(marker)})
    try:
        rulebook.wait_for(r"'type': 'sync_done'")
        for name in HOSTILE:
            conn.lookupByName(name).destroy()
        for name in HOSTILE:
            wait_running(conn, name, DEADLINE)
        runs = playbook_runs(rulebook, len(HOSTILE))
        out = rulebook.output()
        assert not marker.exists(), 'ansible-core %s evaluated a VM name: %s was written' % (version, marker)
        # the rule fired for each hostile VM, by its UUID, and the playbook ran with that ansible-core
        assert sorted(runs) == sorted(('lifecycle STOPPED', uuid) for uuid in hostile_vms), out[-4000:]
        assert set(re.findall(r'\(ansible-core ([0-9]+\.[0-9]+)\.', out)) == {version}, out[-4000:]
        # the source sent the names withheld: null, percent-encoded, flagged
        assert "'withheld': ['name']" in out and "'name': None" in out, out[-4000:]
    finally:
        rulebook.stop()
    assert not marker.exists(), 'ansible-core %s evaluated a VM name: %s was written' % (version, marker)


@pytest.mark.parametrize('extra,message', [
    ({'vm_uuid': 'web-1'}, 'vm_uuid: must be a libvirt domain UUID'),
    ({'vm_uuid': '6695eb01-f6a4-8304-79aa-97f2502e193f', 'vm_name': 'web-1'}, 'not given with vm_name'),
    ({'vm_uuid': '00000000-0000-4000-8000-000000000000'}, 'vm_uuid: no VM of the host has UUID 00000000-0000-4000-8000-000000000000'),
])
def test_the_reconcile_playbook_refuses_what_is_not_a_vm_uuid_of_the_host(extra, message):
    # libvirt's test driver (test:///default, one domain 'test'): nothing is changed, the message names the variable
    rc, out = run_playbook(os.path.join(ROOT, 'playbooks', 'reconcile.yml'), dict(extra, libvirt_uri='test:///default'))
    failed = [host for play in out['plays'] for task in play['tasks'] for host in task['hosts'].values() if host.get('failed')]
    assert rc != 0 and len(failed) == 1 and message in failed[0]['msg'], json.dumps(out)[-3000:]
    assert not [task for play in out['plays'] for task in play['tasks'] if task['task']['name'].startswith('converge.virt.reconcile')], out
