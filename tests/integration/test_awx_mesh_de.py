"""The collection's event source inside a decision environment at a site (issue 38 item 5).

EDA runs a rulebook activation as a container of a decision environment (DE): ansible-rulebook, its Drools engine on
Java, and the collections the rulebook names.  ``python -m tools.awxlab build`` builds one with ansible-builder from the
collection (a Debian base with Debian's default-jre-headless, ansible-rulebook from the wheelhouse; tools/awxlab/build.py,
``build_de``).  Here the collection's shipped rulebook (``converge.virt.restart_stopped``: the libvirt_events source,
a rule that runs the collection's reconcile playbook for a VM recorded ACTIVE that stopped) runs in that DE with podman
on execution node exec1, in exec1's network namespace (the site's libvirt hosts are reachable there only), as an
activation close to the site would.  A VM converged by an AWX job through the mesh is then destroyed behind the
collection's back at that site: the source sends STOPPED (after its stopped_delay), the rule runs the reconcile playbook
inside the DE, and the VM runs again; the activation's output shows the event, the rule's playbook run for that VM's
UUID and a clean recap.  Not through receptor: EDA starts activations with podman (or Kubernetes), not through the mesh.

Opt-in like test_awx_mesh.py (``make test-awx``, CONVERGE_VIRT_AWX_MESH=1); skipped naming the build when the DE is
not built.
"""

# pylint: disable=redefined-outer-name

import os
import re
import subprocess
import time

import libvirt
import yaml

from tests.integration.awx_mesh_gate import require_mesh
from tools.awxlab import build as awx_build

require_mesh(decision_environment=True)

# pylint: disable=wrong-import-position
from tests.integration.test_awx_mesh import converge, domain_state, lab, site_uri  # noqa: E402,F401 pylint: disable=unused-import
from tools.awxlab import mesh  # noqa: E402

NODE = 'exec1'
STOPPED_DELAY = 2
RUN_BY = re.compile(r"converge\.virt\.reconcile \(([^)]+)\) for VM uuid ([0-9a-f-]{36})")


class Activation:
    """The shipped rulebook in the DE, as a podman container in ``node``'s network namespace; its output in a file."""

    def __init__(self, lab, tmp_path, node, uri):
        self.name = f'converge-virt-de-{node}'
        self.dir = os.path.join(str(tmp_path), 'activation')
        os.makedirs(self.dir)
        with open(os.path.join(self.dir, 'inventory.yml'), 'w', encoding='utf-8') as handle:
            yaml.safe_dump({'all': {'hosts': {'localhost': {'ansible_connection': 'local',
                                                            'ansible_python_interpreter': '/usr/bin/python3'}}}}, handle)
        with open(os.path.join(self.dir, 'vars.yml'), 'w', encoding='utf-8') as handle:
            yaml.safe_dump({'libvirt_uri': uri, 'stopped_delay': STOPPED_DELAY}, handle)
        self.log = os.path.join(str(tmp_path), 'activation.log')
        site = lab['nodes'][node]['site']
        argv = mesh.nsenter(mesh.load(lab['dir']), node) + [
            'podman', 'run', '--rm', '--name', self.name, '--network=host', '--user=0', '--pull=never',
            '-v', f'{site}:{site}:rw', '-v', f'{self.dir}:/activation:ro', '-e', 'ANSIBLE_NOCOLOR=1',
            '-e', 'ANSIBLE_LOCALHOST_WARNING=0', '-e', 'PYTHONUNBUFFERED=1', '-w', '/tmp', awx_build.de_image(),
            'ansible-rulebook', '-r', 'converge.virt.restart_stopped', '-i', '/activation/inventory.yml',
            '--vars', '/activation/vars.yml', '--print-events', '-v']
        with open(self.log, 'w', encoding='utf-8') as out:
            # pylint: disable-next=consider-using-with
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         env=mesh.node_env(lab['dir'], node), start_new_session=True)

    def output(self):
        with open(self.log, encoding='utf-8', errors='replace') as handle:
            return handle.read()

    def wait_for(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output())
            if found:
                return found
            assert self.proc.poll() is None, f'the activation ended (rc {self.proc.returncode}):\n{self.output()[-4000:]}'
            time.sleep(0.3)
        raise AssertionError(f'the activation never printed {pattern!r}:\n{self.output()[-4000:]}')

    def stop(self):
        subprocess.run(['podman', 'stop', '--time', '10', self.name], env=awx_build.podman_env(), capture_output=True,
                       check=False, timeout=120)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            subprocess.run(['podman', 'rm', '--force', self.name], env=awx_build.podman_env(), capture_output=True,
                           check=False, timeout=120)
            self.proc.wait(timeout=60)


def de_versions():
    """ansible-rulebook's own report of itself inside the DE (its version, Drools' and Java's)."""
    out = subprocess.run(['podman', 'run', '--rm', '--network=none', '--pull=never', awx_build.de_image(), 'ansible-rulebook',
                          '--version'], env=awx_build.podman_env(), capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_the_rulebook_in_the_decision_environment_restarts_a_vm_stopped_at_its_site(lab, tmp_path):
    versions = de_versions()
    print(versions)
    assert re.search(r'Java version\s*[:=]\s*17', versions), versions
    uri = site_uri(lab, NODE)
    name = 'de-vm'
    _pdd, _hidden, processed, _state = converge(lab, tmp_path, NODE, name, 'running')
    assert processed['status'] == 'successful', processed
    activation = Activation(lab, tmp_path, NODE, uri)
    try:
        # the source's first sync lists the VM: the activation reaches the site's host from the DE
        activation.wait_for(r"'type': 'sync_done'", 300)
        assert re.search(r"'name': '%s'" % re.escape(name), activation.output()), activation.output()[-3000:]
        conn = libvirt.open(uri)
        try:
            uuid = conn.lookupByName(name).UUIDString()
            conn.lookupByName(name).destroy()
            destroyed = time.monotonic()
            deadline = destroyed + 180
            while domain_state(uri, name) != libvirt.VIR_DOMAIN_RUNNING:
                assert time.monotonic() < deadline, f'{name} not running 180 s after it was destroyed:\n{activation.output()[-4000:]}'
                time.sleep(0.5)
            took = time.monotonic() - destroyed
        finally:
            conn.close()
        print(f'the DE restarted {name} {took:.1f} s after it was destroyed')
        assert took >= STOPPED_DELAY - 0.2, took
        activation.wait_for(r'PLAY RECAP', 60)
        out = activation.output()
        assert "'event': 'STOPPED'" in out, out[-4000:]
        assert RUN_BY.findall(out) == [('lifecycle STOPPED', uuid)], out[-4000:]
        assert re.search(r'localhost\s+: ok=\d+\s+changed=[1-9]\d*\s+unreachable=0\s+failed=0', out), out[-4000:]
    finally:
        activation.stop()
        _pdd, _hidden, processed, _state = converge(lab, tmp_path, NODE, name, 'absent')
    assert processed['status'] == 'successful', processed
    assert subprocess.run(['podman', 'container', 'exists', activation.name], env=awx_build.podman_env(),
                          check=False).returncode == 1
