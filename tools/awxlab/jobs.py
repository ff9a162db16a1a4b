"""A job the way AWX runs one through its mesh: ``transmit`` on the controller, ``receptorctl work submit`` to a chosen
execution node (``ansible-runner worker`` there starts it inside the EE with podman), ``work results`` streamed back
into ``process`` on the controller, which writes the job events and artifacts into the private data dir.

``submit`` returns the work unit's id (so that a test can cancel it or kill the node meanwhile); ``finish`` streams
its results into ``process``; ``run`` does both.  Container options as AWX's for an execution node: host networking of
the node's namespace (its libvirt hosts' loopback addresses), the private data dir owned by the container's user.
Commands run with argument lists only.
"""

import json
import os
import re
import subprocess
import sys

from . import build, mesh

HERE = os.path.dirname(os.path.abspath(__file__))


def container_kwargs(volume_mounts=()):
    """ansible-runner's process isolation settings for a job in the collection's EE."""
    return {'process_isolation': True, 'process_isolation_executable': 'podman', 'container_image': build.ee_image(),
            'container_options': ['--network=host', '--user=0', '--pull=never'],
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


def finish(directory, unit, private_data_dir, ident=None, timeout=900):
    """Stream the unit's results into ``ansible-runner process`` (the job's ``ident``: by default the private data
    dir's name, as ``submit`` gives it); return ({status, rc, explanation}, receptor work status)."""
    results = os.path.abspath(private_data_dir) + '.results'
    with open(results, 'wb') as handle:
        try:
            subprocess.run([build.venv_bin('receptorctl'), '--socket', os.path.join(directory, 'control.sock'), 'work',
                            'results', unit], stdout=handle, stderr=subprocess.PIPE, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise mesh.MeshError(f'work unit {unit}: no complete results within {timeout} s '
                                 f'(receptor: {work_status(directory, unit)})') from exc
    state = work_status(directory, unit)
    try:
        ident = ident or os.path.basename(os.path.abspath(private_data_dir))
        processed = json.loads(_stream('process', os.path.abspath(private_data_dir), ident, results, timeout=timeout))
    except (mesh.MeshError, ValueError) as exc:
        processed = {'status': 'error', 'rc': None, 'error': str(exc)}
    finally:
        os.unlink(results)
    mesh.receptorctl(directory, 'work', 'release', unit, check=False)
    return processed, state


def run(directory, node, private_data_dir, timeout=900, **kwargs):
    """submit then finish; returns (runner status dict, receptor work status)."""
    unit = submit(directory, node, private_data_dir, **kwargs)
    return finish(directory, unit, private_data_dir, ident=kwargs.get('ident'), timeout=timeout)


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
