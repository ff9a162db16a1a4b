"""A job the way AWX runs one through its mesh: ``transmit`` on the controller, ``receptorctl work submit`` to a chosen
execution node (``ansible-runner worker`` there starts it inside the EE with podman), ``work results`` streamed back
into ``process`` on the controller, which writes the job events and artifacts into the private data dir.

``submit`` returns the work unit's id (so that a test can cancel it or kill the node meanwhile); ``finish`` streams
its results into ``process`` and gives the job's end (the runner's status, or the controller's verdict when the job
was canceled, its node was lost or no results came in time); ``cancel`` cancels it; ``run`` submits and finishes;
``cleanup_node`` removes what dead jobs left on a node.  Container options as AWX's for an execution node: host
networking of the node's namespace (its libvirt hosts' loopback addresses), the private data dir owned by the container's user.
Commands run with argument lists only.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

from . import build, mesh

HERE = os.path.dirname(os.path.abspath(__file__))
POLL = 2.0   # seconds between the controller's looks at a running job (receptorctl: a python start each)
ENDED = ('Succeeded', 'Failed')   # receptor's StateName of a unit that ended on its node
QUIET = 5   # looks without new results after which an ended unit's results are taken as complete


def container_kwargs(volume_mounts=(), options=()):
    """ansible-runner's process isolation settings for a job in the collection's EE; ``options``: more ``podman run``
    options, as AWX's DEFAULT_CONTAINER_RUN_OPTIONS setting adds them to every job (e.g. ``--pid=host``)."""
    return {'process_isolation': True, 'process_isolation_executable': 'podman', 'container_image': build.ee_image(),
            'container_options': ['--network=host', '--user=0', '--pull=never', *options],
            'container_volume_mounts': list(volume_mounts)}


def _stream(mode, *args, timeout=900):
    out = subprocess.run([build.venv_bin('python'), os.path.join(HERE, 'runner_stream.py'), mode, *args], capture_output=True,
                         text=True, timeout=timeout, check=False, env=dict(os.environ, PYTHONPATH=''))
    if out.returncode != 0:
        raise mesh.MeshError(f"ansible-runner {mode} failed (exit {out.returncode}): {out.stderr.strip()[-3000:]}")
    return out.stdout


def submit(directory, node, private_data_dir, **kwargs):
    """Transmit the job in ``private_data_dir`` (runner kwargs: playbook, or binary and cmdline; container settings)
    and submit it to ``node``; return the work unit id."""
    private_data_dir = os.path.abspath(private_data_dir)
    kwargs.setdefault('ident', os.path.basename(private_data_dir))
    spec = os.path.join(private_data_dir + '.transmit.json')
    payload = private_data_dir + '.payload'
    with open(spec, 'w', encoding='utf-8') as handle:
        json.dump(dict(kwargs, private_data_dir=private_data_dir), handle)
    try:
        _stream('transmit', spec, payload)
    finally:
        os.unlink(spec)
    out = mesh.receptorctl(directory, 'work', 'submit', '--node', node, '--payload', payload, mesh.WORKTYPE,
                           '--param', 'params=--delete')
    os.unlink(payload)
    found = re.search(r'Unit ID:\s*(\S+)', out)
    if not found:
        raise mesh.MeshError(f'receptorctl work submit gave no unit id: {out.strip()[-500:]}')
    return found.group(1)


def work_status(directory, unit):
    """The work unit's status as receptor reports it (a dict: State, StateName, Detail, ...)."""
    listed = json.loads(mesh.receptorctl(directory, 'work', 'list', '--unit_id', unit))
    return listed[unit] if unit in listed else listed


def cancel(directory, unit):
    """Cancel the work unit from the controller (``receptorctl work cancel``), as AWX cancels a job."""
    return mesh.receptorctl(directory, 'work', 'cancel', unit)


def _canceled(state):
    return bool((state.get('ExtraData') or {}).get('LocalCancelled')) or state.get('Detail') == 'Canceled'


def _brief(state):
    return f"{state.get('StateName')}: {state.get('Detail')}" if isinstance(state, dict) else str(state)


def _look(directory, unit, results, watch):
    """One look at a running job (every POLL s): the controller's verdict, ('ended', None) when receptor says the unit
    ended and no more results arrive, or None while it may go on."""
    now = time.monotonic()
    state = work_status(directory, unit)
    grown, watch['size'] = os.path.getsize(results) != watch['size'], os.path.getsize(results)
    watch['quiet'] = 0 if grown else watch['quiet'] + 1
    if watch['canceled_at'] is None and _canceled(state):
        watch['canceled_at'] = now
    if watch['canceled_at'] is not None and not grown:
        # what was on its way when the cancel came has arrived
        return 'canceled', 'canceled from the controller (receptorctl work cancel)'
    if state.get('StateName') in ENDED and (watch['size'] >= (state.get('StdoutSize') or 0) or watch['quiet'] >= QUIET):
        # the unit ended and its whole output (the size receptor reports) is here, or nothing came for QUIET looks
        return 'ended', None
    if watch['node'] is not None and watch['lost_after'] is not None:
        if watch['node'] in mesh.reachable(directory):
            watch['unreachable_since'] = None
        else:
            watch['unreachable_since'] = watch['unreachable_since'] or now
            if now - watch['unreachable_since'] >= watch['lost_after']:
                return 'failed', f"execution node {watch['node']} lost: no route to it for {round(now - watch['unreachable_since'])} s"
    if now - watch['started'] > watch['timeout']:
        return 'failed', f"no complete results within {watch['timeout']} s"
    return None


def _complete(results):
    """True when the worker's stream in ``results`` ends with its eof line (ansible-runner's last word)."""
    with open(results, 'rb') as handle:
        lines = handle.read().rstrip(b'\n').rsplit(b'\n', 1)
    try:
        return 'eof' in json.loads(lines[-1])
    except ValueError:
        return False


def _read_results(directory, unit, results, watch):
    """``receptorctl work results`` into ``results`` until it ends or a verdict comes; (verdict, its exit status, stderr)."""
    with open(results, 'wb') as handle, tempfile.TemporaryFile() as errors:
        argv = [build.venv_bin('receptorctl'), '--socket', os.path.join(directory, 'control.sock'), 'work', 'results', unit]
        proc = subprocess.Popen(argv, stdout=handle, stderr=errors)  # pylint: disable=consider-using-with
        verdict = None
        try:
            while proc.poll() is None and verdict is None:
                time.sleep(POLL)
                verdict = _look(directory, unit, results, watch)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        errors.seek(0)
        return verdict, proc.returncode, errors.read().decode(errors='replace').strip()


def finish(directory, unit, private_data_dir, ident=None, timeout=900, node=None, lost_after=None):  # pylint: disable=too-many-arguments
    """Stream the unit's results into ``ansible-runner process`` (the job's ``ident``: by default the private data
    dir's name, as ``submit`` gives it); return ({status, rc, explanation, stream_status}, receptor work status).

    The controller's verdict, as AWX reaches one, never a hang: the results end, or receptor says the unit ended and
    no more results come (the runner's status; ``failed`` with receptor's detail when the stream has no status: the
    worker itself failed); or the unit was canceled (``cancel``: receptor then never ends its results stream) - status ``canceled``; or ``node`` had no
    route from the control node for ``lost_after`` seconds - status ``failed``, "execution node <node> lost";
    or ``timeout`` passed - status ``failed``, "no complete results".  In each of the last three the events that
    arrived are processed all the same (``stream_status``: what ``process`` made of the cut stream), and the unit is
    left for the caller (release it once its node answers again).  ``work results`` that fails, or ends without the
    worker's eof line (a link cut under the stream), is asked again from the start (the deadlines hold); a unit is
    released only once its results ended.
    """
    results = os.path.abspath(private_data_dir) + '.results'
    watch = {'started': time.monotonic(), 'timeout': timeout, 'node': node, 'lost_after': lost_after,
             'unreachable_since': None, 'canceled_at': None, 'size': -1, 'quiet': 0}
    cut_short = None
    reads = 0
    while True:
        reads += 1
        verdict, code, errors = _read_results(directory, unit, results, watch)
        if verdict is not None and verdict[0] != 'ended':
            break
        if code == 0 or verdict is not None:
            # the results ended: complete (the worker's eof line), or, cut short under a link cut, read again from
            # the start (receptor keeps the unit's output on its node) until complete or the same twice
            size = os.path.getsize(results)
            if _complete(results) or size == cut_short:
                verdict = None
                break
            cut_short = size
            watch['size'], watch['quiet'] = -1, 0
        else:
            verdict = _look(directory, unit, results, watch)
            if verdict is not None and verdict[0] != 'ended':
                verdict = (verdict[0], f'{verdict[1]}; receptorctl work results: {errors[-300:]}')
                break
        time.sleep(POLL)
    state = work_status(directory, unit)
    try:
        ident = ident or os.path.basename(os.path.abspath(private_data_dir))
        processed = json.loads(_stream('process', os.path.abspath(private_data_dir), ident, results, timeout=timeout))
    except (mesh.MeshError, ValueError) as exc:
        processed = {'status': 'error', 'rc': None, 'error': str(exc)}
    finally:
        os.unlink(results)
    processed['stream_status'] = processed['status']
    processed['reads'] = reads   # how often ``work results`` was asked (more than once: it failed or was cut short)
    if verdict is None and processed['status'] == 'error' and state.get('StateName') == 'Failed':
        # the unit ended without the runner's last words (the worker itself failed): receptor's detail says how
        processed.update(status='failed', explanation=f"the work unit failed on its node (receptor: {_brief(state)})")
    if verdict is None:
        mesh.receptorctl(directory, 'work', 'release', unit, check=False)
    else:
        processed.update(status=verdict[0], rc=None, explanation=f'{verdict[1]} (receptor: {_brief(state)})')
    return processed, state


def run(directory, node, private_data_dir, timeout=900, lost_after=None, **kwargs):
    """submit then finish; returns (runner status dict, receptor work status)."""
    unit = submit(directory, node, private_data_dir, **kwargs)
    return finish(directory, unit, private_data_dir, ident=kwargs.get('ident'), timeout=timeout, node=node, lost_after=lost_after)


def cleanup_node(directory, node, timeout=120):
    """What AWX runs on an execution node to remove the private data dirs its dead jobs left (a worker killed with its
    node never removes its own): ``ansible-runner worker cleanup`` as a work unit on ``node``, for the dirs
    ``ansible-runner worker`` makes in the node's TMPDIR (``tmp*``), no grace period (AWX's is 60 minutes); return its
    output."""
    pattern = os.path.join(directory, node + '-tmp', 'tmp*')
    out = mesh.receptorctl(directory, 'work', 'submit', '--node', node, '--no-payload', mesh.WORKTYPE,
                           '--param', f'params=cleanup --file-pattern={pattern} --grace-period=0')
    found = re.search(r'Unit ID:\s*(\S+)', out)
    if not found:
        raise mesh.MeshError(f'receptorctl work submit (cleanup) gave no unit id: {out.strip()[-500:]}')
    try:
        return mesh.receptorctl(directory, 'work', 'results', found.group(1), timeout=timeout)
    finally:
        mesh.receptorctl(directory, 'work', 'release', found.group(1), check=False)


def events(private_data_dir):
    """The job events ``process`` wrote (artifacts/<ident>/job_events/*.json), in counter order."""
    found = []
    artifacts = os.path.join(private_data_dir, 'artifacts')
    for ident in os.listdir(artifacts) if os.path.isdir(artifacts) else ():
        folder = os.path.join(artifacts, ident, 'job_events')
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            with open(os.path.join(folder, name), encoding='utf-8') as handle:
                found.append(json.load(handle))
    return sorted(found, key=lambda event: event.get('counter', 0))


if __name__ == '__main__':
    sys.exit('tools.awxlab.jobs is a library (see tests/integration/test_awx_mesh.py)')
