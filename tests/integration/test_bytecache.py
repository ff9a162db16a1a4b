"""The bytecode cache through ansible: the first task fills it, later tasks reuse it unchanged, the switch turns it off."""

import os

import libvirt
import pytest

from tests.integration.ansible_run import run_module
from tools.virtlab import hosts as virtlab_hosts

PREFIX = 'ansible_collections.converge.virt.plugins.module_utils.'


def entries(directory):
    """{module name: (inode, mtime_ns)} of the cache entries."""
    found = {}
    for name in os.listdir(directory):
        info = os.stat(os.path.join(directory, name))
        found[name.split('.cpython')[0]] = (info.st_ino, info.st_mtime_ns)
    return found


@pytest.fixture
def vm_args(libvirt_hosts):
    host = libvirt_hosts[0]
    args = {'uri': host.uri, 'name': 'bytecache-vm', 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(), 'state': 'present'}
    yield args
    conn = libvirt.open(host.uri)
    try:
        conn.lookupByName('bytecache-vm').undefine()
    except libvirt.libvirtError:
        pass
    conn.close()


def test_tasks_reuse_the_compiled_module_utils(tmp_path, vm_args):
    # PYTHONDONTWRITEBYTECODE (set by many container images) keeps __pycache__ out of source trees; it does not turn this
    # cache off (that is CONVERGE_VIRT_BYTECODE_CACHE=0, below)
    env = {'XDG_CACHE_HOME': str(tmp_path / 'xdg'), 'PYTHONDONTWRITEBYTECODE': '1'}
    directory = tmp_path / 'xdg' / 'converge.virt' / 'bytecode'

    first = run_module('vm', vm_args, env=env)
    assert first['_rc'] == 0 and first['changed'] and first['vm']['vm_state'] == 'STOPPED', first
    filled = entries(str(directory))
    for module in ('_libvirt.vm_backend', '_libvirt.domain_spec', '_libvirt.taskstore', '_phase.tasks', '_phase.vm_plan', '_common.redact'):
        assert PREFIX + module in filled, sorted(filled)
    assert oct(os.stat(str(directory)).st_mode & 0o777) == '0o700'

    again = run_module('vm', vm_args, env=env)
    assert again['_rc'] == 0 and not again['changed'] and again['vm']['vm_state'] == 'STOPPED', again
    assert entries(str(directory)) == filled  # every entry read, none compiled and written again

    off = tmp_path / 'off'
    third = run_module('vm', vm_args, env=dict(env, XDG_CACHE_HOME=str(off), CONVERGE_VIRT_BYTECODE_CACHE='0'))
    assert third['_rc'] == 0 and not third['changed'], third
    assert not off.exists()


def test_an_unsafe_cache_directory_is_not_used(tmp_path, vm_args):
    shared = tmp_path / 'shared'
    (shared / 'converge.virt').mkdir(parents=True)
    os.chmod(str(shared / 'converge.virt'), 0o777)
    result = run_module('vm', vm_args, env={'XDG_CACHE_HOME': str(shared), 'PYTHONDONTWRITEBYTECODE': ''})
    assert result['_rc'] == 0 and result['vm']['vm_state'] == 'STOPPED', result
    assert not (shared / 'converge.virt' / 'bytecode').exists()
