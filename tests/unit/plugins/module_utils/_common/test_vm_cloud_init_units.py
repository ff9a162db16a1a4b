# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pure parts of the vm module's cloud_init option: the libvirt seed cdrom and the KubeVirt Secret/volume."""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common import nocloud
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import spec_of
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import cloud_init as kci
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.vm_manifest import declared_differences, declared_vm, manifest_for_create
from ansible_collections.converge.virt.plugins.module_utils._libvirt import cloud_init as lci
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_build, domain_diff

USER_DATA = {'chpasswd': {'users': [{'name': 'u', 'password': 'pw-secret-value'}]}}


def test_libvirt_seed_pool_defaults_to_the_first_disk_pool_then_default():
    assert lci.Seed('vm1', {'user_data': USER_DATA}, [{'path': '/x'}, {'pool': 'fast', 'volume': 'a'}]).pool == 'fast'
    assert lci.Seed('vm1', {'user_data': USER_DATA}, []).pool == 'default'
    assert lci.Seed('vm1', {'user_data': USER_DATA, 'pool': 'seeds'}, [{'pool': 'fast', 'volume': 'a'}]).pool == 'seeds'


def test_libvirt_seed_digest_is_the_content_digest_and_changes_with_the_user_data():
    seed = lci.Seed('vm1', {'user_data': USER_DATA, 'pool': 'p', 'meta_data': None}, [])
    assert seed.digest == nocloud.seed_digest(nocloud.seed_files({'user_data': USER_DATA}, 'vm1'))
    other = lci.Seed('vm1', {'user_data': {'chpasswd': {'users': [{'name': 'u', 'password': 'other'}]}}}, [])
    assert other.digest != seed.digest
    assert seed.volume == 'vm1-cidata.iso'
    files, label = nocloud.read_seed_iso(seed.image())
    assert label == 'cidata' and files == seed.files


def test_libvirt_seed_cdrom_is_a_readonly_sata_volume_in_the_domain():
    seed = lci.Seed('vm1', {'user_data': USER_DATA}, [{'pool': 'p', 'volume': 'root.qcow2'}])
    spec = lci.with_seed_disk({'name': 'vm1', 'memory': '64MiB', 'disks': [{'pool': 'p', 'volume': 'root.qcow2', 'dev': 'vda'}]}, seed)
    root = ET.fromstring(domain_build.build_domain_xml(spec))
    cdrom = [d for d in root.findall('devices/disk') if d.get('device') == 'cdrom']
    assert len(cdrom) == 1 and cdrom[0].get('type') == 'volume'
    assert cdrom[0].find('source').attrib == {'pool': 'p', 'volume': 'vm1-cidata.iso'}
    assert cdrom[0].find('target').attrib == {'dev': 'sdz', 'bus': 'sata'} and cdrom[0].find('readonly') is not None
    xml = domain_build.build_domain_xml(spec)
    assert not domain_diff.desired_vs_actual(spec, xml), 'the seed cdrom compares equal to itself'
    assert lci.seed_in_domain(xml, 'vm1') == ('p', 'vm1-cidata.iso')
    assert lci.seed_in_domain(xml, 'vm2') is None, 'only the VM\'s own seed is ever removed with it'
    user_disk = {'pool': 'p', 'volume': 'vm1-cidata.iso', 'dev': 'vda', 'device': 'disk'}
    plain = domain_build.build_domain_xml({'name': 'vm1', 'memory': '64MiB', 'disks': [user_disk]})
    assert lci.seed_in_domain(plain, 'vm1') is None, 'a user disk is never taken for the seed'


def test_libvirt_seed_refusals_name_the_field():
    seed = lci.Seed('vm1', {'user_data': USER_DATA}, [])
    with pytest.raises(InvalidDeclaration) as exc:
        lci.with_seed_disk({'name': 'vm1'}, seed)
    assert exc.value.field == 'cloud_init' and 'disks' in exc.value.reason
    with pytest.raises(InvalidDeclaration) as exc:
        lci.with_seed_disk({'name': 'vm1', 'disks': [{'pool': 'p', 'volume': 'a', 'dev': 'sdz'}]}, seed)
    assert exc.value.field == 'disks[0].dev'
    with pytest.raises(InvalidDeclaration) as exc:
        lci.Seed('vm1', {'user_data': 'no marker'}, [])
    assert exc.value.field == 'cloud_init.user_data'
    with pytest.raises(InvalidDeclaration) as exc:
        lci.Seed('vm1', {'user_data': USER_DATA, 'pool': ' '}, [])
    assert exc.value.field == 'cloud_init.pool'


def test_spec_of_leaves_cloud_init_to_the_backends():
    spec = spec_of({'name': 'vm1', 'vcpus': 1, 'cloud_init': {'user_data': USER_DATA}})
    assert spec == {'name': 'vm1', 'vcpus': 1}


def test_kubevirt_seed_secret_volume_and_digest_annotation():
    seed = kci.Seed('kv1', {'user_data': USER_DATA, 'network_config': {'version': 2, 'ethernets': {}}})
    data = seed.secret_data()
    assert sorted(data) == ['networkdata', 'userdata']
    assert base64.b64decode(data['userdata']) == seed.files['user-data'] and b'pw-secret-value' in seed.files['user-data']
    declared = kci.with_seed(declared_vm({'name': 'kv1', 'memory': '64Mi', 'disks': [{'name': 'root', 'image': 'img'}]}, 'default'), seed)
    manifest, found = kci.split(declared)
    assert found is seed and kci.DECLARED_KEY not in manifest
    body = manifest_for_create(manifest)
    tspec = body['spec']['template']['spec']
    assert [d['name'] for d in tspec['domain']['devices']['disks']] == ['root', 'cloudinitdisk']
    assert tspec['volumes'][-1] == {'name': 'cloudinitdisk', 'cloudInitNoCloud': {'secretRef': {'name': 'kv1-cloudinit'},
                                                                                  'networkDataSecretRef': {'name': 'kv1-cloudinit'}}}
    assert body['spec']['template']['metadata']['annotations'][kci.DIGEST_ANNOTATION] == seed.digest
    assert 'pw-secret-value' not in repr(body), 'the VirtualMachine never carries the user data'
    changed = kci.Seed('kv1', {'user_data': {'chpasswd': {'users': [{'name': 'u', 'password': 'new'}]}},
                               'network_config': {'version': 2, 'ethernets': {}}})
    redeclared, _seed = kci.split(kci.with_seed(declared_vm({'name': 'kv1', 'disks': [{'name': 'root', 'image': 'img'}]}, 'default'), changed))
    paths = [c['path'] for c in declared_differences(redeclared['spec'], body['spec'])]
    assert paths == ['spec.template.metadata.annotations.' + kci.DIGEST_ANNOTATION], 'a changed seed changes only the digest in the VM'


def test_kubevirt_secret_differs_compares_the_data():
    seed = kci.Seed('kv1', {'user_data': USER_DATA})
    assert kci.secret_differs(None, seed)
    assert not kci.secret_differs({'data': seed.secret_data()}, seed)
    assert kci.secret_differs({'data': dict(seed.secret_data(), networkdata='e30=')}, seed)
    assert kci.secret_differs({'data': {'userdata': base64.b64encode(b'#cloud-config\n{}\n').decode()}}, seed)


def test_kubevirt_refusals_name_the_field():
    for cloud_init, field in (({'user_data': USER_DATA, 'meta_data': {'a': 'b'}}, 'cloud_init.meta_data'),
                              ({'user_data': USER_DATA, 'pool': 'p'}, 'cloud_init.pool'),
                              ({'user_data': 42}, 'cloud_init.user_data')):
        with pytest.raises(InvalidDeclaration) as exc:
            kci.Seed('kv1', cloud_init)
        assert exc.value.field == field
    declared = declared_vm({'name': 'kv1', 'disks': [{'name': 'cloudinitdisk', 'image': 'img'}]}, 'default')
    with pytest.raises(InvalidDeclaration) as exc:
        kci.with_seed(declared, kci.Seed('kv1', {'user_data': USER_DATA}))
    assert exc.value.field == 'disks[0].name'


def test_a_vms_item_user_data_is_hidden_like_a_top_level_one():
    import types  # pylint: disable=import-outside-toplevel
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # pylint: disable=import-outside-toplevel
    from ansible_collections.converge.virt.plugins.modules import vm  # pylint: disable=import-outside-toplevel
    args = {'uri': 'qemu:///system', 'vms': [{'name': 'a1', 'disks': [], 'cloud_init': {'user_data': USER_DATA}}]}
    params = ArgumentSpecValidator(vm.argument_spec()).validate(args).validated_parameters
    params['state'] = None
    module = types.SimpleNamespace(params=params, no_log_values=set())
    items = vm.fleet_items(module, vm.declaration)
    assert 'pw-secret-value' in module.no_log_values, 'ansible masks the item\'s user data in every output'
    assert items[0][1]['cloud_init'].volume == 'a1-cidata.iso'


def test_user_data_values_that_are_public_or_too_short_are_not_masked_the_others_are():
    from ansible_collections.converge.virt.plugins.module_utils._common import vm_run  # pylint: disable=import-outside-toplevel
    params = {'name': 'web-1', 'password': 'web-pass', 'uri': 'qemu+ssh://root:uri-pw@h/system', 'disks': [{'path': '/srv/web-1.qcow2'}],
              'cloud_init': {'user_data': {'hostname': 'web-1', 'users': [{'name': 'ops', 'shell': '/bin/sh', 'sudo': 'ALL'}],
                                           'chpasswd': {'users': [{'name': 'ops', 'password': 'pw-secret-value'}]},
                                           'write_files': [{'path': '/srv/web-1.qcow2', 'content': 'web-pass'}],
                                           'runcmd': [['echo', 'uri-pw']], 'growpart': {'devices': ['/']}}}}
    # the VM's own name and a disk path the task gives in the open; 'ops', 'ALL' and '/' hide nothing
    assert vm_run.unmasked_user_data_values(params) == {'web-1', '/srv/web-1.qcow2', 'ops', 'ALL', '/'}
    # the password, the libvirt password and the URI's password stay masked though user data repeats them
    assert not vm_run.unmasked_user_data_values(dict(params, name='web-pass', disks=[{'path': 'uri-pw'}])) & {'web-pass', 'uri-pw'}


def test_a_user_data_host_name_equal_to_the_vm_name_leaves_the_result_readable():
    """End to end through AnsibleModule's masking (check mode on libvirt's test driver): the result names the VM; the
    user data's password appears nowhere."""
    import json  # pylint: disable=import-outside-toplevel
    from ansible_collections.converge.virt.plugins.modules import vm  # pylint: disable=import-outside-toplevel
    from tests.reliability.fuzzing import run_main  # pylint: disable=import-outside-toplevel
    args = {'uri': 'test:///default', 'name': 'web-1', 'memory': '64MiB', 'state': 'stopped', 'disks': [],
            'cloud_init': {'user_data': {'hostname': 'web-1', 'growpart': {'devices': ['/']},
                                         'chpasswd': {'users': [{'name': 'ops', 'password': 'pw-secret-value'}]}}, 'pool': 'default-pool'},
            '_ansible_verbosity': 3}
    result = run_main(vm, args, check_mode=True)
    assert not result.get('failed'), result
    assert result['vm']['name'] == 'web-1', result['vm']
    text = json.dumps(result)
    assert 'pw-secret-value' not in text and 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER' not in json.dumps(result['vm'])
