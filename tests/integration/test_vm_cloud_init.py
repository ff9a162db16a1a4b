"""converge.virt.vm cloud_init on a real private libvirt host, driven through the ansible CLI.

The NoCloud seed is a volume ``<vm>-cidata.iso`` in the VM's pool, attached as a read-only SATA cdrom:
its content is read back through libvirt (a stream download) and opened with pycdlib; a re-run is no
change; changed user data replaces the volume and is a restart-needing change; absent removes the
seed volume only; the user data never appears in a result nor in the -vvv output.
"""

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import libvirt
import pytest

from tests.integration.ansible_run import BIN, ansible_env, ok, run_module
from tools.virtlab import hosts as virtlab_hosts

POOL = 'cipool'
USER_VOLUME = 'ci-user.raw'
SECRET = 'hunter2-cloud-init-secret-5f1c'


@pytest.fixture(scope='module')
def pool(host, conn, tmp_path_factory):
    path = str(tmp_path_factory.mktemp('cipool'))
    ok(run_module('volume', {'uri': host.uri, 'pool': POOL, 'pool_path': path, 'name': USER_VOLUME, 'capacity': '1MiB'}))
    return conn.storagePoolLookupByName(POOL)


def user_data(secret=SECRET):
    return {'chpasswd': {'expire': False, 'users': [{'name': 'ciuser', 'password': secret, 'type': 'text'}]},
            'runcmd': [['touch', '/run/' + secret]]}


def args(host, name, **extra):
    out = {'uri': host.uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(), 'shutdown_timeout': 1,
           'disks': [{'pool': POOL, 'volume': USER_VOLUME, 'dev': 'vda'}],
           'cloud_init': {'user_data': user_data(), 'ssh_authorized_keys': ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOciTest ci@test']}}
    out.update(extra)
    return out


def seed_files(conn, name):
    """The files of the seed volume, read back through libvirt (stream download) and opened with pycdlib."""
    from ansible_collections.converge.virt.plugins.module_utils._common import nocloud  # pylint: disable=import-outside-toplevel
    vol = conn.storagePoolLookupByName(POOL).storageVolLookupByName(name + '-cidata.iso')
    stream = conn.newStream(0)
    vol.download(stream, 0, vol.info()[1], 0)
    chunks = []
    while True:
        data = stream.recv(1 << 16)
        if isinstance(data, int) or not data:
            break
        chunks.append(data)
    stream.finish()
    return nocloud.read_seed_iso(b''.join(chunks))


def tamper(conn, name):
    """Overwrite the seed volume with zeros through libvirt (what another tool could do)."""
    vol = conn.storagePoolLookupByName(POOL).storageVolLookupByName(name + '-cidata.iso')
    size = vol.info()[1]
    stream = conn.newStream(0)
    vol.upload(stream, 0, size, 0)
    left = [size]

    def zeros(_stream, nbytes, _opaque):
        count = min(nbytes, left[0])
        left[0] -= count
        return b'\0' * count
    stream.sendAll(zeros, None)
    stream.finish()


def seed_cdrom(conn, name):
    root = ET.fromstring(conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    found = [d for d in root.findall('devices/disk') if d.get('device') == 'cdrom']
    assert len(found) == 1, 'exactly one cdrom (the seed)'
    disk = found[0]
    return disk.find('source').attrib, disk.find('target').attrib, disk.find('readonly') is not None


def volume_names(conn):
    pool_obj = conn.storagePoolLookupByName(POOL)
    pool_obj.refresh(0)
    return sorted(v.name() for v in pool_obj.listAllVolumes(0))


def assert_secret_hidden(result):
    assert SECRET not in json.dumps(result), 'the user data leaked into the result'


def test_seed_created_attached_idempotent_replaced_and_removed(host, conn, pool):
    del pool
    name = 'ci-vm1'
    checked = run_module('vm', args(host, name, state='running'), check=True)
    assert checked['changed'] and checked['cloud_init']['changed']
    assert name + '-cidata.iso' not in volume_names(conn), 'check mode must not write the seed'
    assert_secret_hidden(checked)

    created = ok(run_module('vm', args(host, name, state='running'), diff=True))
    assert_secret_hidden(created)
    assert created['changed'] and created['cloud_init']['volume'] == name + '-cidata.iso' and created['cloud_init']['pool'] == POOL
    assert created['diff']['before']['cloud_init_digest'] is None
    digest = created['cloud_init']['digest']
    assert created['diff']['after']['cloud_init_digest'] == digest and len(digest) == 64
    source, target, readonly = seed_cdrom(conn, name)
    assert source == {'pool': POOL, 'volume': name + '-cidata.iso'} and target['bus'] == 'sata' and readonly
    files, label = seed_files(conn, name)
    assert label == 'cidata'
    assert files['user-data'].startswith(b'#cloud-config\n')
    body = json.loads(files['user-data'].split(b'\n', 1)[1])
    assert body['chpasswd']['users'][0]['password'] == SECRET
    assert body['ssh_authorized_keys'] == ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOciTest ci@test']
    meta = json.loads(files['meta-data'])
    assert meta['local-hostname'] == name and meta['instance-id'].startswith('iid-')
    assert conn.lookupByName(name).isActive()

    again = ok(run_module('vm', args(host, name, state='running')))
    assert not again['changed'] and not again['cloud_init']['changed'] and again['cloud_init']['digest'] == digest
    assert not run_module('vm', args(host, name, state='running'), check=True)['changed']

    # the volume is what counts, not a record of what was written: a seed overwritten behind the module's back is repaired
    tamper(conn, name)
    repaired = ok(run_module('vm', args(host, name, state='running')))
    assert repaired['changed'] and repaired['cloud_init']['changed'] and repaired['diff']['before']['cloud_init_digest'] == ''
    assert seed_files(conn, name)[0] == files
    ok(run_module('vm', args(host, name, state='running', restart_on_change=True)))

    changed_args = args(host, name, state='running', cloud_init={'user_data': user_data(SECRET + '-v2')})
    predicted = run_module('vm', changed_args, check=True)
    assert predicted['changed'] and predicted['cloud_init']['restart_needed'] and predicted['vm']['pending_restart']
    assert seed_files(conn, name)[0] == files, 'check mode must not replace the seed'
    replaced = ok(run_module('vm', changed_args, diff=True))
    assert SECRET not in json.dumps(replaced)
    assert replaced['changed'] and replaced['cloud_init']['changed'] and replaced['cloud_init']['restart_needed']
    assert replaced['vm']['pending_restart'] and replaced['diff']['after']['pending_restart'] and not replaced['diff']['before']['pending_restart']
    assert replaced['diff']['before']['cloud_init_digest'] == digest != replaced['diff']['after']['cloud_init_digest']
    new_files = seed_files(conn, name)[0]
    assert json.loads(new_files['user-data'].split(b'\n', 1)[1])['chpasswd']['users'][0]['password'] == SECRET + '-v2'
    assert json.loads(new_files['meta-data'])['instance-id'] != meta['instance-id'], 'a new seed is a new instance to cloud-init'
    still = ok(run_module('vm', changed_args))
    assert not still['changed'] and still['vm']['pending_restart'], 'the restart is still owed'
    restarted = ok(run_module('vm', dict(changed_args, restart_on_change=True)))
    assert [s['action'] for s in restarted['steps']] == ['reboot_soft'] and not restarted['vm']['pending_restart']

    gone = ok(run_module('vm', {'uri': host.uri, 'name': name, 'state': 'absent'}))
    assert gone['changed'] and gone['cloud_init'] == {'pool': POOL, 'volume': name + '-cidata.iso', 'removed': True}
    names = volume_names(conn)
    assert name + '-cidata.iso' not in names and USER_VOLUME in names, 'only the seed goes with the VM'


def test_bad_cloud_init_names_the_field(host, pool):
    del pool
    bad = run_module('vm', args(host, 'ci-bad', cloud_init={'user_data': 'echo no marker'}))
    assert bad.get('failed') and 'cloud_init.user_data' in bad['msg']
    no_disks = dict(args(host, 'ci-bad'))
    del no_disks['disks']
    refused = run_module('vm', no_disks)
    assert refused.get('failed') and 'cloud_init' in refused['msg'] and 'disks' in refused['msg']


def test_user_data_never_in_verbose_output(host, conn, pool):
    del pool
    name = 'ci-vm2'
    cmd = [os.path.join(BIN, 'ansible'), 'localhost', '-c', 'local', '-i', 'localhost,', '-m', 'converge.virt.vm', '-vvv', '--diff',
           '-a', json.dumps(args(host, name, state='present'))]
    env = ansible_env({'ANSIBLE_STDOUT_CALLBACK': 'default', 'ANSIBLE_LOAD_CALLBACK_PLUGINS': '0'})
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'cidata.iso' in proc.stdout, 'the -vvv output shows the result'
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    fleet = run_module('vm', {'uri': host.uri, 'vms': [dict((k, v) for k, v in args(host, name).items() if k not in ('uri', 'shutdown_timeout'))]})
    assert not fleet['changed'] and fleet['results'][0]['cloud_init']['digest']
    assert SECRET not in json.dumps(fleet), 'a vms item\'s user data is hidden too'
    ok(run_module('vm', {'uri': host.uri, 'name': name, 'state': 'absent'}))
    assert name + '-cidata.iso' not in volume_names(conn)


def test_cloud_init_added_to_a_running_vm_is_applied_at_its_next_boot(host, conn, pool):
    del pool
    name = 'ci-vm3'
    plain = args(host, name, state='running', disks=[])
    del plain['cloud_init']
    ok(run_module('vm', plain))
    added = ok(run_module('vm', args(host, name, state='running', disks=[], cloud_init={'user_data': user_data(), 'pool': POOL})))
    assert SECRET not in json.dumps(added)
    assert added['changed'] and added['cloud_init']['changed'] and added['vm']['pending_restart']
    source, target, readonly = seed_cdrom(conn, name)
    assert source['volume'] == name + '-cidata.iso' and target['dev'] == 'sdz' and readonly
    live = ET.fromstring(conn.lookupByName(name).XMLDesc(0))
    assert not [d for d in live.findall('devices/disk') if d.get('device') == 'cdrom'], 'a SATA cdrom is not hot-plugged'
    again = ok(run_module('vm', args(host, name, state='running', disks=[], cloud_init={'user_data': user_data(), 'pool': POOL})))
    assert not again['changed'] and again['vm']['pending_restart']
    restarted = ok(run_module('vm', args(host, name, state='running', disks=[], cloud_init={'user_data': user_data(), 'pool': POOL}, restart_on_change=True)))
    assert [s['action'] for s in restarted['steps']] == ['reboot_soft'] and not restarted['vm']['pending_restart']
    live = ET.fromstring(conn.lookupByName(name).XMLDesc(0))
    assert [d.find('source').get('volume') for d in live.findall('devices/disk') if d.get('device') == 'cdrom'] == [name + '-cidata.iso']
    ok(run_module('vm', {'uri': host.uri, 'name': name, 'state': 'absent'}))
    assert name + '-cidata.iso' not in volume_names(conn)
