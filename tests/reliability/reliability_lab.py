"""Shared helpers of the libvirt reliability suites (interruption, concurrency, faults).

Everything goes through the real ansible CLI (``ansible-playbook`` with the
JSON results callback of tests/integration) against private libvirt hosts of
:mod:`tools.virtlab.hosts`; the world is read back with libvirt-python.
Playbooks are written as JSON (a YAML subset), so no value is ever templated
into text.
"""

import hashlib
import json
import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET

import libvirt

from tests.integration.ansible_run import BIN, run_cli, ansible_env
from tools.virtlab import hosts as virtlab_hosts

NS = 'https://converge.virt/xmlns/vm/1'
MIB = 1024 * 1024
LONG = os.environ.get('RELIABILITY_LONG', '') not in ('', '0')

# the polling of the suites expects lookups to fail: keep libvirt's default handler from printing each one
libvirt.registerErrorHandler(lambda _ctx, _err: None, None)


class Lab:
    """Private libvirt hosts of one suite, with read-write connections."""

    def __init__(self, state_dir, hosts):
        self.state_dir = state_dir
        self.hosts = hosts
        self.conns = [libvirt.open(h.uri) for h in hosts]

    def reconnect(self, index):
        """Re-open the connection to host ``index`` (after its daemon restarted)."""
        try:
            self.conns[index].close()
        except libvirt.libvirtError:
            pass
        self.conns[index] = libvirt.open(self.hosts[index].uri)
        return self.conns[index]

    def close(self):
        """Close every connection."""
        for conn in self.conns:
            try:
                conn.close()
            except libvirt.libvirtError:
                pass

    def restart_daemon(self, index, kill=False):
        """Stop host ``index``'s libvirtd (SIGTERM, or SIGKILL with ``kill``) and start it again in the same namespaces.

        Guests keep running (QEMU is not a child of libvirtd); the new daemon
        reconnects to them. Returns the new libvirtd pid.
        """
        host = self.hosts[index]
        old = host.pids['libvirtd']
        keeper = host.pids.get('virtlogd')
        if not keeper or not virtlab_hosts.pid_alive(keeper):
            raise AssertionError('virtlogd of %s is gone: cannot re-enter its namespaces' % host.name)
        os.kill(old, signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + 30
        while virtlab_hosts.pid_alive(old) and time.monotonic() < deadline:
            try:
                os.waitpid(old, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)
        return self.start_daemon(index)

    def start_daemon(self, index):
        """Start libvirtd of host ``index`` again (after it died) inside the mount/UTS namespaces of its virtlogd."""
        host = self.hosts[index]
        keeper = host.pids['virtlogd']
        with open(os.path.join(host.root, 'nsinit.json'), encoding='utf-8') as handle:
            argv = json.load(handle)['libvirtd_argv']
        with open(os.path.join(host.root, 'daemon.log'), 'ab') as log:
            proc = subprocess.Popen(['nsenter', '--mount', '--uts', '-t', str(keeper)] + argv,  # pylint: disable=consider-using-with
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        host.pids['libvirtd'] = proc.pid
        virtlab_hosts._write_hosts(self.state_dir, self.hosts)  # pylint: disable=protected-access
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = libvirt.open(host.uri)
                conn.getHostname()
                conn.close()
                break
            except libvirt.libvirtError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.reconnect(index)
        return proc.pid


def start_lab(state_dir, layout, count=2):
    """Start ``count`` private hosts (``layout``: virtlab_layout(slot)) and return a :class:`Lab`."""
    started = virtlab_hosts.start_hosts(count, state_dir, **layout)
    return Lab(state_dir, started)


def stop_lab(lab):
    """Close connections and stop the hosts (guests included)."""
    lab.close()
    virtlab_hosts.stop_hosts(lab.state_dir)


# ------------------------------------------------------------------ playbooks

def write_playbook(path, tasks, name='reliability'):
    """Write a one-play playbook on localhost (JSON is YAML) and return its path."""
    play = [{'name': name, 'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks}]
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(play, handle, indent=1)
    return path


def playbook_cmd(path, extra_vars=None):
    """The ansible-playbook argument list for ``path``."""
    cmd = [os.path.join(BIN, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local', path]
    if extra_vars:
        cmd += ['-e', json.dumps(extra_vars)]
    return cmd


def private_tmpdir(path):
    """A private directory (0700) for the temporary files of the run of ``path``: ``<path>.tmp``."""
    tmpdir = path + '.tmp'
    os.makedirs(tmpdir, mode=0o700, exist_ok=True)
    return tmpdir


def start_playbook(path, extra_vars=None, env=None, output=None):
    """Start ansible-playbook in its own process group (so it can be killed whole); return the Popen.

    ``output``: an open file for stdout and stderr (nothing blocks on a full pipe while the caller polls).
    The run's temporary files (the modules' AnsiballZ payload directories) go to a private directory next to
    the playbook (``TMPDIR``), so a run that is killed leaves nothing in the machine's /tmp.
    """
    env = dict(env or {})
    env.setdefault('TMPDIR', private_tmpdir(path))
    return subprocess.Popen(playbook_cmd(path, extra_vars), env=ansible_env(env), stdout=output or subprocess.PIPE,  # pylint: disable=consider-using-with
                            stderr=output or subprocess.PIPE, text=True, start_new_session=True)


def finish_playbook(proc, timeout=600):
    """Wait for a :func:`start_playbook` process; return (rc, parsed JSON output)."""
    out, err = proc.communicate(timeout=timeout)
    try:
        return proc.returncode, json.loads(out)
    except ValueError:
        raise AssertionError('ansible-playbook printed no JSON (rc %d):\n%s\n%s' % (proc.returncode, out[-3000:], err[-3000:]))


def run_playbook(path, extra_vars=None, env=None, timeout=600):
    """Run a playbook to its end; return (rc, parsed JSON output) (the CLI forked from the tests' zygote, as
    tests/integration/ansible_run.py runs it; TMPDIR is the playbook's private directory, as for start_playbook)."""
    env = dict(env or {})
    env.setdefault('TMPDIR', private_tmpdir(path))
    returncode, out, err = run_cli('ansible-playbook', playbook_cmd(path, extra_vars), ansible_env(env), timeout)
    try:
        return returncode, json.loads(out)
    except ValueError:
        raise AssertionError('ansible-playbook printed no JSON (rc %d):\n%s\n%s' % (returncode, out[-3000:], err[-3000:]))


def process_tree(root):
    """``root`` and every descendant process (by parent pid, from /proc)."""
    children = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry, encoding='ascii', errors='replace') as handle:
                ppid = int(handle.read().rsplit(')', 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def cmdline(pid):
    """The command line of ``pid`` as bytes (empty when gone)."""
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            return handle.read()
    except OSError:
        return b''


def kill_tree(proc):
    """SIGKILL ansible-playbook and every process it started.

    ansible's workers call setsid(), so the module processes are in other
    process groups than the playbook's: the whole tree is frozen (SIGSTOP, so
    nothing forks in between), then killed, as if the controller machine died.
    """
    frozen = set()
    while True:
        tree = set(process_tree(proc.pid)) - frozen
        if not tree:
            break
        for pid in tree:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        frozen |= tree
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate()
    deadline = time.monotonic() + 10
    while any(virtlab_hosts.pid_alive(pid) for pid in frozen):
        if time.monotonic() > deadline:
            raise AssertionError('processes of the killed run survived SIGKILL')
        time.sleep(0.02)
    return sorted(frozen)


def task_results(data):
    """[(task name, result)] of the localhost results of a run."""
    out = []
    for play in data.get('plays', []):
        for task in play['tasks']:
            if 'localhost' in task['hosts']:
                out.append((task['task']['name'], task['hosts']['localhost']))
    return out


def changed_tasks(data):
    """Names of the tasks that reported a change."""
    return [name for name, res in task_results(data) if res.get('changed')]


def failures(data):
    """[(task name, msg)] of the failed tasks."""
    out = []
    for name, res in task_results(data):
        if res.get('failed'):
            items = [(item.get('name'), item.get('msg')) for item in res.get('results') or [] if isinstance(item, dict) and item.get('failed')]
            out.append((name, res.get('msg'), items) if items else (name, res.get('msg')))
    return out


# --------------------------------------------------------------- world checks

def domain_names(conn):
    """Names of every domain defined or running on ``conn``."""
    return sorted(d.name() for d in conn.listAllDomains(0))


def metadata_xml(dom):
    """The converge metadata fragment of ``dom`` (persistent config when there is one), or None."""
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG if dom.isPersistent() else libvirt.VIR_DOMAIN_AFFECT_LIVE
    try:
        return dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NS, flags)
    except libvirt.libvirtError:
        return None


def record(dom):
    """The converge record of ``dom`` as a dict (parsing raises on corrupt metadata)."""
    text = metadata_xml(dom)
    if text is None:
        return {}
    return {child.tag.split('}')[-1]: child.text for child in ET.fromstring(text)}


def live_record(dom):
    """The record in the live definition of a running domain ({} when not running)."""
    if not dom.isActive():
        return {}
    try:
        text = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NS, libvirt.VIR_DOMAIN_AFFECT_LIVE)
    except libvirt.libvirtError:
        return {}
    return {child.tag.split('}')[-1]: child.text for child in ET.fromstring(text)}


def job_active(dom):
    """True when a libvirt job (migration) runs on ``dom``."""
    try:
        return dom.jobInfo()[0] in (libvirt.VIR_DOMAIN_JOB_BOUNDED, libvirt.VIR_DOMAIN_JOB_UNBOUNDED)
    except libvirt.libvirtError:
        return False


def state_of(conn, name):
    """libvirt state number of ``name`` on ``conn``, or None when not defined there."""
    try:
        return conn.lookupByName(name).state()[0]
    except libvirt.libvirtError:
        return None


def sha256_region(path, length):
    """sha256 of the first ``length`` bytes of ``path``."""
    with open(path, 'rb') as handle:
        return hashlib.sha256(handle.read(length)).hexdigest()


def write_pattern(path, length, seed):
    """Write a deterministic pattern of ``length`` bytes at the start of ``path``; return its sha256."""
    block = hashlib.sha256(seed.encode()).digest() * 2048
    with open(path, 'r+b') as handle:
        written = 0
        while written < length:
            chunk = block[:length - written]
            handle.write(chunk)
            written += len(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    return sha256_region(path, length)


def disk_sources(dom, flags=0):
    """{target dev: source file} of ``dom``'s disks."""
    root = ET.fromstring(dom.XMLDesc(flags))
    out = {}
    for disk in root.findall('./devices/disk'):
        source = disk.find('source')
        out[disk.find('target').get('dev')] = source.get('file') if source is not None else None
    return out
