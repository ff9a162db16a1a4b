"""The built tarball, installed with ansible-galaxy, works on its own.

Builds the collection with ``ansible-galaxy collection build``, installs the tarball with
``ansible-galaxy collection install -p <tmp>``, and runs the collection playbook
``converge.virt.lifecycle`` (the lifecycle role, the vm / vm_info / volume / volume_info modules and
their module_utils) against a private libvirt host, with ANSIBLE_COLLECTIONS_PATH naming only the
installed copy (no PYTHONPATH, no scan of sys.path), up and down again. The tarball must hold the
plugins, roles and playbooks, and leave out the repository-only tooling (tools/, bench/, tests output).
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml

from tests.integration.ansible_run import ROOT, run_playbook

BIN = os.path.dirname(sys.executable)


def _galaxy(args, cwd, collections_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith('ANSIBLE_') and k != 'PYTHONPATH'}
    # only the target counts: a copy installed elsewhere (~/.ansible/collections) must not make the install a no-op
    env.update(ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_COLLECTIONS_SCAN_SYS_PATH='false')
    proc = subprocess.run([os.path.join(BIN, 'ansible-galaxy')] + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    """(collections path, tarball path) of the freshly built and installed collection."""
    work = tmp_path_factory.mktemp('installed')
    dest = work / 'collections'
    _galaxy(['collection', 'build', '--output-path', str(work), ROOT], cwd=str(work), collections_path=str(dest))
    with open(os.path.join(ROOT, 'galaxy.yml'), encoding='utf-8') as handle:
        meta = yaml.safe_load(handle)
    tarball = work / ('%s-%s-%s.tar.gz' % (meta['namespace'], meta['name'], meta['version']))
    assert tarball.exists(), os.listdir(work)
    _galaxy(['collection', 'install', '-p', str(dest), str(tarball)], cwd=str(work), collections_path=str(dest))
    return dest, tarball


def test_tarball_holds_the_collection_not_the_lab(installed):
    tarball = installed[1]
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    for wanted in ('plugins/modules/vm.py', 'plugins/inventory/libvirt.py', 'roles/lifecycle/tasks/main.yml',
                   'roles/lifecycle/meta/argument_specs.yml', 'roles/evacuate/tasks/main.yml', 'roles/reconcile/tasks/main.yml',
                   'playbooks/demo.yml', 'playbooks/lifecycle.yml', 'playbooks/templates/state_table.j2', 'meta/runtime.yml'):
        assert wanted in names, wanted
    assert not [n for n in names if n.split('/')[0] in ('tools', 'bench', 'build', '.venv')]


def test_installed_copy_runs_the_lifecycle_playbook(installed, libvirt_hosts, tmp_path):
    dest = installed[0]
    root = dest / 'ansible_collections' / 'converge' / 'virt'
    assert (root / 'MANIFEST.json').exists() and not (root / 'tools').exists()
    env = {'ANSIBLE_COLLECTIONS_PATH': str(dest), 'ANSIBLE_COLLECTIONS_SCAN_SYS_PATH': 'false', 'PYTHONPATH': ''}
    listed = subprocess.run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'list', 'converge.virt', '--format', 'json'],
                            env=dict({k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}, **env), capture_output=True, text=True,
                            timeout=120, check=False)
    assert list(json.loads(listed.stdout)) == [str(dest / 'ansible_collections')], listed.stdout + listed.stderr

    host = libvirt_hosts[0]
    fleet = {
        'lifecycle_uri': host.uri,
        'lifecycle_volumes': [{'name': 'inst-data.raw', 'pool': 'inst-pool', 'pool_path': str(tmp_path / 'pool'), 'capacity': '4MiB'}],
        'lifecycle_vms': [
            {'name': 'inst-web', 'memory': '64MiB', 'domain_type': 'qemu',
             'disks': [{'dev': 'vdb', 'pool': 'inst-pool', 'volume': 'inst-data.raw', 'format': 'raw'}]},
            {'name': 'inst-idle', 'memory': '64MiB', 'domain_type': 'qemu', 'state': 'stopped'},
        ],
    }
    rc, data = run_playbook('converge.virt.lifecycle', extra_vars=fleet, env=env)
    assert rc == 0, json.dumps(data)[-3000:]
    facts = _task(data, 'Report per VM')['ansible_facts']
    report = dict((row['name'], row) for row in facts['lifecycle_report'])
    assert report['inst-web']['status'] == 'Running' and report['inst-web']['disks'] == 1
    assert report['inst-web']['steps'] == ['create', 'start']
    assert report['inst-idle']['vm_state'] == 'STOPPED' and report['inst-idle']['steps'] == ['create']

    rc, data = run_playbook('converge.virt.lifecycle', extra_vars=dict(fleet, lifecycle_state='absent', lifecycle_shutdown_timeout=0),
                            env=env)
    assert rc == 0, json.dumps(data)[-3000:]
    report = dict((row['name'], row) for row in _task(data, 'Report per VM')['ansible_facts']['lifecycle_report'])
    assert report['inst-web']['stopped'] == 'forced off' and report['inst-idle']['stopped'] == 'already stopped'
    assert all(row['undefined'] for row in report.values())
    assert _task(data, 'Show the report')['msg'][-1] == 'inst-data.raw kept'


def _task(data, name_part):
    for play in data['plays']:
        for task in play['tasks']:
            if name_part in task['task']['name']:
                return task['hosts']['localhost']
    raise AssertionError('no task named %r' % name_part)


def test_execution_environment_context_and_requirements(installed, tmp_path):
    """ansible-builder: the installed copy's meta/execution-environment.yml yields our Python and system requirements
    (what the image build's introspect step collects), and `ansible-builder create` makes a build context from the tarball."""
    dest, tarball = installed
    builder = os.path.join(BIN, 'ansible-builder')
    proc = subprocess.run([builder, 'introspect', '--sanitize', str(dest)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    deps = yaml.safe_load(proc.stdout.split('\n', 1)[1])
    python = ' '.join(deps['python'])
    system = ' '.join(deps['system'])
    for wanted in ('libvirt-python', 'kubernetes', 'jinja2'):
        assert wanted in python and 'from collection converge.virt' in python, (wanted, deps)
    for wanted in ('libvirt-dev [platform:dpkg]', 'libvirt-devel [platform:rpm]', 'gcc'):
        assert wanted in system, (wanted, deps)
    (tmp_path / 'requirements.yml').write_text(yaml.safe_dump({'collections': [{'name': '/build/' + tarball.name, 'type': 'file'}]}))
    shutil.copy(str(tarball), str(tmp_path / tarball.name))
    definition = {
        'version': 3,
        'images': {'base_image': {'name': 'quay.io/centos/centos:stream9'}},
        'dependencies': {'python_interpreter': {'package_system': 'python3.11', 'python_path': '/usr/bin/python3.11'},
                         'ansible_core': {'package_pip': 'ansible-core>=2.16'}, 'ansible_runner': {'package_pip': 'ansible-runner'},
                         'galaxy': 'requirements.yml'},
        'additional_build_files': [{'src': tarball.name, 'dest': 'collection'}],
        'additional_build_steps': {'prepend_galaxy': ['COPY _build/collection/%s /build/%s' % (tarball.name, tarball.name)]},
    }
    (tmp_path / 'execution-environment.yml').write_text(yaml.safe_dump(definition))
    proc = subprocess.run([builder, 'create', '-f', 'execution-environment.yml', '-c', 'context'], cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    context = tmp_path / 'context'
    containerfile = (context / 'Dockerfile').read_text() if (context / 'Dockerfile').exists() else (context / 'Containerfile').read_text()
    assert (context / '_build' / 'collection' / tarball.name).exists()
    assert yaml.safe_load((context / '_build' / 'requirements.yml').read_text())['collections'][0]['name'] == '/build/' + tarball.name
    assert 'COPY _build/collection/%s' % tarball.name in containerfile and 'ansible-galaxy' in containerfile
    assert 'introspect' in containerfile, containerfile
