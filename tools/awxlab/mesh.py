"""The mesh: a control node and two execution nodes, AWX's topology, in the lab.

``up(directory)``, run inside a private network namespace (``python -m tools.virtlab netns -- ...``), starts:

- for each execution node (``exec1``, ``exec2``: two sites) a network namespace of its own, made *inside* the
  caller's by ``unshare --net`` (held by tools/awxlab/nshold.py), with nothing but loopback; in it (entered with
  ``nsenter --net``: ``ip netns exec`` would remount /sys and podman would find no cgroup mount) the node's receptor
  (a ``tcp-listener`` on 127.0.0.1:27199, a ``work-command`` of worktype ``ansible-runner`` running
  ``ansible-runner worker``, which starts the job in the EE with podman), the near side of its link
  (tools/awxlab/relay.py) and the site's private libvirt hosts (tools/virtlab/hosts.py, two per site);
- the control node's receptor in the caller's namespace, with a ``control-service`` socket (``control.sock``, what
  ``receptorctl`` and the job runner use) and one ``tcp-peer`` per execution node to 127.0.0.1:<port>, the far side of
  the node's link: a relay from that port to the unix socket ``link-<node>.sock``.

So the mesh's only addresses are loopback addresses of the caller's namespace and of the nodes' own; no interface
joins two namespaces (a link is a unix socket: ``cut_link`` stops its far relay, ``restore_link`` starts it again).
Faults: ``kill_node`` kills a node's receptor and link only (the worker and the job's container live on);
``lose_node`` kills every process of the node at once, as when the machine goes away (its site's libvirt hosts stay:
they are other machines); ``restart_node`` brings the node's receptor and link back.
``state.json`` records the processes; ``down`` stops them and the hosts.  Commands run with argument lists only.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

from tools.virtlab import netns
from . import build

ROOT = build.ROOT
NODES = ('exec1', 'exec2')
LISTEN_PORT = 27199
WORKTYPE = 'ansible-runner'
HOSTS_PER_SITE = 2


class MeshError(build.AwxlabError):
    """The mesh could not start or does not answer; the message says which part and why."""


def _write_json(path, data):
    with open(path + '.tmp', 'w', encoding='utf-8') as handle:
        json.dump(data, handle, indent=1)
    os.replace(path + '.tmp', path)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def node_env(directory, node):
    """A node's environment: podman's (build.podman_env), the lab's virtualenv first on PATH, its own TMPDIR (where
    ``ansible-runner worker`` unpacks a job; ``--delete`` removes it)."""
    tmp = os.path.join(directory, node + '-tmp')
    os.makedirs(tmp, mode=0o700, exist_ok=True)
    env = dict(build.podman_env(), TMPDIR=tmp,
               PATH=os.pathsep.join([os.path.dirname(build.venv_bin('ansible-runner')), os.environ.get('PATH', '/usr/bin:/bin')]))
    return env


def _start(directory, name, argv, env=None):
    log = open(os.path.join(directory, name + '.log'), 'ab')  # pylint: disable=consider-using-with
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                            start_new_session=True)
    log.close()
    return proc.pid


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f'/proc/{pid}/stat', encoding='utf-8') as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def nsenter(state, node):
    """The argv prefix that runs a command in ``node``'s network namespace."""
    return ['nsenter', f"--net=/proc/{state['nodes'][node]['holder']}/ns/net", '--']


def _receptor_config(directory, node):
    if node == 'control':
        return [{'node': {'id': 'control', 'datadir': os.path.join(directory, 'control-data')}}, {'log-level': 'info'},
                {'control-service': {'service': 'control', 'filename': os.path.join(directory, 'control.sock')}}]
    return [{'node': {'id': node, 'datadir': os.path.join(directory, node + '-data')}}, {'log-level': 'info'},
            {'tcp-listener': {'port': LISTEN_PORT, 'bindaddr': '127.0.0.1'}},
            {'control-service': {'service': 'control', 'filename': os.path.join(directory, node + '.sock')}},
            {'work-command': {'worktype': WORKTYPE, 'command': build.venv_bin('ansible-runner'), 'params': 'worker',
                              'allowruntimeparams': True}}]


def receptorctl(directory, *args, socket_name='control.sock', timeout=120, check=True):
    """Run receptorctl against a node's control socket; return its stdout."""
    out = subprocess.run([build.venv_bin('receptorctl'), '--socket', os.path.join(directory, socket_name), *args],
                         capture_output=True, text=True, timeout=timeout, check=False)
    if check and out.returncode != 0:
        raise MeshError(f"receptorctl {' '.join(args)} failed (exit {out.returncode}): {(out.stderr or out.stdout).strip()[-2000:]}")
    return out.stdout


def _link_argv(directory, state, node, side):
    path = os.path.join(directory, f'link-{node}.sock')
    relay = os.path.join(ROOT, 'tools', 'awxlab', 'relay.py')
    if side == 'near':
        return nsenter(state, node) + [sys.executable, relay, 'unix-to-tcp', path, '127.0.0.1', str(LISTEN_PORT)]
    return [sys.executable, relay, 'tcp-to-unix', '127.0.0.1', str(state['nodes'][node]['port']), path]


def _wait(what, check, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise MeshError(f'{what} within {timeout} s')


def up(directory, hosts_per_site=HOSTS_PER_SITE):  # pylint: disable=too-many-locals
    """Start the mesh in ``directory`` (see the module's docstring); return the state (also in state.json)."""
    if not netns.in_private_network_namespace():
        raise MeshError('the mesh starts only inside a private network namespace (python -m tools.virtlab netns -- ...)')
    if not build.built():
        raise MeshError('the awx parts are not built: python -m tools.awxlab build')
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    os.chmod(directory, 0o700)
    state = {'dir': directory, 'nodes': {}, 'ee_image': build.ee_image(), 'receptor': build.receptor_binary()}
    statefile = os.path.join(directory, 'state.json')
    try:
        for node in NODES:
            ready = os.path.join(directory, node + '.ready')
            holder = _start(directory, node + '-netns', ['unshare', '--net', '--', sys.executable, '-m', 'tools.awxlab.nshold', ready])
            state['nodes'][node] = {'holder': holder, 'port': _free_port()}
            _write_json(statefile, state)
            _wait(f'the network namespace of {node} was not ready', lambda r=ready: os.path.exists(r), 30)
            config = os.path.join(directory, node + '.yml')
            _write_json(config, _receptor_config(directory, node))
            state['nodes'][node]['receptor'] = _start(directory, node + '-receptor',
                                                      nsenter(state, node) + [build.receptor_binary(), '--config', config],
                                                      node_env(directory, node))
            state['nodes'][node]['near'] = _start(directory, node + '-link-near', _link_argv(directory, state, node, 'near'))
            state['nodes'][node]['far'] = _start(directory, node + '-link-far', _link_argv(directory, state, node, 'far'))
            site = os.path.join(directory, 'site-' + node)
            out = subprocess.run(nsenter(state, node) + [sys.executable, '-m', 'tools.virtlab', 'hosts', 'start', '--count',
                                                         str(hosts_per_site), '--state-dir', site, '--name-prefix', node + 'h'],
                                 cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
            if out.returncode != 0:
                raise MeshError(f'the libvirt hosts of {node} did not start: {(out.stderr or out.stdout).strip()[-2000:]}')
            state['nodes'][node]['site'] = site
            state['nodes'][node]['hosts'] = json.loads(out.stdout)
            _write_json(statefile, state)
        config = os.path.join(directory, 'control.yml')
        _write_json(config, _receptor_config(directory, 'control') +
                    [{'tcp-peer': {'address': f"127.0.0.1:{state['nodes'][node]['port']}", 'redial': True}} for node in NODES])
        state['control'] = _start(directory, 'control-receptor', [build.receptor_binary(), '--config', config],
                                  node_env(directory, 'control'))
        _write_json(statefile, state)
        _wait('the control node did not reach both execution nodes', lambda: reachable(directory) >= set(NODES), 90)
    except BaseException:
        down(directory)
        raise
    return state


def load(directory):
    with open(os.path.join(os.path.abspath(directory), 'state.json'), encoding='utf-8') as handle:
        return json.load(handle)


def reachable(directory):
    """The execution nodes the control node has routes to (receptorctl status)."""
    try:
        out = receptorctl(directory, 'status', '--json', timeout=20, check=False)
        status = json.loads(out)
    except (ValueError, subprocess.SubprocessError, OSError):
        return set()
    return set(status.get('RoutingTable') or {}) & set(NODES)


def status(directory):
    state = load(directory)
    pids = [state.get('control')] + [pid for node in state['nodes'].values() for key, pid in node.items()
                                     if key in ('holder', 'receptor', 'near', 'far')]
    return all(pid and _alive(pid) for pid in pids) and reachable(directory) >= set(NODES)


def _kill(pid, timeout=10):
    if not pid or not _alive(pid):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def kill_node(directory, node):
    """An execution node lost: its receptor and its link killed (SIGKILL), as when the machine goes away."""
    state = load(directory)
    for key in ('receptor', 'near'):
        pid = state['nodes'][node].get(key)
        if pid and _alive(pid):
            os.killpg(pid, signal.SIGKILL)


def _ns(pid, kind):
    try:
        return os.readlink(f'/proc/{pid}/ns/{kind}')
    except OSError:
        return None


def node_processes(directory, node):
    """The execution node's own processes: every process in its network namespace but the namespace's holder and its
    site's libvirt hosts (each host's daemons and guests run in the host's own mount namespace): the receptor, the near
    side of the link, receptor's command runner, ``ansible-runner worker``, podman, conmon and the job's container."""
    state = load(directory)
    entry = state['nodes'][node]
    net = _ns(entry['holder'], 'net')
    hypervisors = {host.get('mnt_ns') for host in entry.get('hosts') or ()} - {None, ''}
    if not net or not hypervisors:
        raise MeshError(f"{node}: its namespace or its hosts' mount namespaces are not known (state.json)")
    found = []
    for name in os.listdir('/proc'):
        if name.isdigit() and int(name) not in (entry['holder'], os.getpid()) and _ns(name, 'net') == net \
                and _ns(name, 'mnt') not in hypervisors:
            found.append(int(name))
    return found


def lose_node(directory, node):
    """An execution node lost as a machine is lost: SIGKILL to every process of it (``node_processes``) at once, until
    none is left (a process forked meanwhile is killed by the next pass); return the pids killed."""
    killed = set()
    for _round in range(20):
        pids = [pid for pid in node_processes(directory, node) if _alive(pid)]
        if not pids:
            return sorted(killed)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed.update(pids)
        time.sleep(0.2)
    raise MeshError(f'{node}: processes still alive after 20 rounds of SIGKILL: {node_processes(directory, node)}')


def cut_link(directory, node):
    """Cut the node's mesh link: stop its far relay (every connection through it closes; nothing listens on the port the
    control node's tcp-peer dials)."""
    state = load(directory)
    _kill(state['nodes'][node].get('far'))


def restore_link(directory, node, timeout=90):
    """Start the node's far relay again and wait until the control node has a route to the node (tcp-peer redials)."""
    state = load(directory)
    entry = state['nodes'][node]
    entry['far'] = _start(directory, node + '-link-far', _link_argv(directory, state, node, 'far'))
    _write_json(os.path.join(directory, 'state.json'), state)
    _wait(f'{node} did not become reachable after its link was restored', lambda: node in reachable(directory), timeout)


def restart_node(directory, node):
    """Start a killed execution node's receptor and link again (the same node id, the same work directory)."""
    state = load(directory)
    entry = state['nodes'][node]
    env = node_env(directory, node)
    entry['receptor'] = _start(directory, node + '-receptor',
                               nsenter(state, node) + [state['receptor'], '--config', os.path.join(directory, node + '.yml')], env)
    entry['near'] = _start(directory, node + '-link-near', _link_argv(directory, state, node, 'near'))
    _write_json(os.path.join(directory, 'state.json'), state)
    _wait(f'{node} did not come back', lambda: node in reachable(directory), 90)


def down(directory):
    """Stop everything recorded in ``directory``'s state.json (hosts first, then receptors, links, namespaces)."""
    try:
        state = load(directory)
    except (OSError, ValueError):
        return
    for node, entry in state['nodes'].items():
        if entry.get('site') and entry.get('holder') and _alive(entry['holder']):
            subprocess.run(nsenter(state, node) + [sys.executable, '-m', 'tools.virtlab', 'hosts', 'stop', '--state-dir',
                                                   entry['site']], cwd=ROOT, capture_output=True, check=False, timeout=120)
    _kill(state.get('control'))
    for entry in state['nodes'].values():
        for key in ('receptor', 'near', 'far', 'holder'):
            _kill(entry.get(key))
