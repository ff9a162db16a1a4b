# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The list forms (``vm`` with ``vms``, ``volume`` with ``volumes``) never ignore an option given next to the list.

Top-level ``state`` and definition options are the defaults of every item (an item's own value wins); options that
belong to one VM or volume are refused, naming the field. Nothing is touched: the declarations are only validated.
"""

from __future__ import annotations

import types

import pytest

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.modules import vm, volume


def params_of(spec, args):
    checked = ArgumentSpecValidator(spec).validate(args)
    assert not checked.error_messages, checked.error_messages
    return checked.validated_parameters


def vm_fleet(args, backend='libvirt'):
    """(state, spec or declared manifest) of every item, as the module would converge them."""
    params = params_of(vm.argument_spec(), dict(args, backend=backend))
    module = types.SimpleNamespace(params=params)
    make = vm.declaration if backend == 'libvirt' else (lambda p: vm.kubevirt_declaration(p, 'default'))
    return [(decl.state, spec) for decl, spec, _name in vm.fleet_items(module, make)]


def test_top_level_state_starts_every_vm_of_a_list_of_names():
    items = vm_fleet({'state': 'running', 'vms': [{'name': 'a'}, {'name': 'b', 'state': 'stopped'}]})
    assert [state for state, _spec in items] == ['running', 'stopped']


def test_without_any_state_items_stay_present():
    assert [state for state, _spec in vm_fleet({'vms': [{'name': 'a'}, {'name': 'b'}]})] == ['present', 'present']


def test_top_level_definition_options_are_defaults_and_the_item_wins():
    items = vm_fleet({'vcpus': 2, 'memory': '512MiB', 'title': 'web', 'interfaces': [{'network': 'default'}],
                      'vms': [{'name': 'a', 'memory': '1GiB'}, {'name': 'b', 'interfaces': [{'bridge': 'br0'}]}]})
    (_s, first), (_s2, second) = items
    assert (first['vcpus'], first['memory'], first['title']) == (2, '1GiB', 'web')
    assert (second['vcpus'], second['memory'], second['title']) == (2, '512MiB', 'web')
    assert first['interfaces'] == [{'network': 'default'}] and second['interfaces'] == [{'bridge': 'br0'}]


def test_kubevirt_fleet_takes_the_defaults_too():
    items = vm_fleet({'state': 'running', 'memory': '64Mi', 'labels': {'tier': 'web'},
                      'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}],
                      'vms': [{'name': 'a'}, {'name': 'b', 'state': 'stopped'}]}, backend='kubevirt')
    assert [state for state, _m in items] == ['running', 'stopped']
    for _state, manifest in items:
        assert manifest['metadata']['labels']['tier'] == 'web'
        assert manifest['spec']['template']['spec']['domain']['resources']['requests']['memory'] == '64Mi'


@pytest.mark.parametrize('args, field', [
    ({'uuid': '8a3d3f4e-4d1c-4b39-9b0e-2f1d9c7e5a11'}, 'uuid'),
    ({'interfaces': [{'network': 'default', 'mac': '52:54:00:00:00:01'}]}, 'interfaces[0].mac'),
    ({'disks': [{'dev': 'vda', 'pool': 'default', 'volume': 'root.qcow2'}]}, 'disks[0]'),
])
def test_per_vm_options_are_refused_at_the_top_level_naming_the_field(args, field):
    with pytest.raises(InvalidDeclaration) as err:
        vm_fleet(dict(args, vms=[{'name': 'a'}, {'name': 'b'}]))
    assert err.value.field == field and 'vms' in err.value.reason


def test_a_shared_readonly_disk_or_one_item_is_a_valid_default():
    shared = [{'dev': 'vdb', 'path': '/srv/iso/tools.img', 'readonly': True}]
    assert all(spec['disks'][0]['path'] == '/srv/iso/tools.img' for _s, spec in vm_fleet({'disks': shared, 'vms': [{'name': 'a'}, {'name': 'b'}]}))
    writable = [{'dev': 'vda', 'pool': 'default', 'volume': 'root.qcow2'}]
    assert vm_fleet({'disks': writable, 'vms': [{'name': 'a'}]})[0][1]['disks'][0]['volume'] == 'root.qcow2'


def test_a_bad_top_level_default_is_named_as_written():
    with pytest.raises(InvalidDeclaration) as err:
        vm_fleet({'memory': 'lots', 'vms': [{'name': 'a'}]})
    assert err.value.field == 'memory' and 'vms[0]' in err.value.reason


def test_kubevirt_option_at_the_top_level_of_a_libvirt_fleet_is_refused():
    with pytest.raises(InvalidDeclaration) as err:
        vm_fleet({'labels': {'a': 'b'}, 'vms': [{'name': 'a'}]})
    assert err.value.field == 'labels'


def volume_specs(args, backend='libvirt'):
    params = params_of(volume.argument_spec(), dict(args, backend=backend))
    return volume.declarations(params) if backend == 'libvirt' else volume.kubevirt_declarations(params)


def test_volume_list_takes_top_level_state_and_options():
    specs = volume_specs({'pool': 'p', 'state': 'absent', 'wipe': True, 'volumes': [{'name': 'a'}, {'name': 'b', 'state': 'present',
                                                                                                    'capacity': '1MiB'}]})
    assert [(s['state'], s['wipe']) for s in specs] == [('absent', True), ('present', True)]
    kube = volume_specs({'capacity': '1Gi', 'storage_class': 'fast', 'volumes': [{'name': 'a'}, {'name': 'b', 'capacity': '2Gi'}]}, 'kubevirt')
    assert [(s['capacity'], s['storage_class']) for s in kube] == [(1024 ** 3, 'fast'), (2 * 1024 ** 3, 'fast')]


@pytest.mark.parametrize('backend', ['libvirt', 'kubevirt'])
def test_volume_shared_attachments_default_is_refused_and_empty_is_kept(backend):
    base = {'pool': 'p'} if backend == 'libvirt' else {}
    with pytest.raises(InvalidDeclaration) as err:
        volume_specs(dict(base, capacity='1GiB', attachments=[{'vm': 'web', 'dev': 'vdb'}], volumes=[{'name': 'a'}, {'name': 'b'}]), backend)
    assert err.value.field == 'attachments' and 'a, b' in err.value.reason
    unplug = volume_specs(dict(base, state='absent', attachments=[], volumes=[{'name': 'a'}, {'name': 'b'}]), backend)
    assert [(s['state'], s['attachments']) for s in unplug] == [('absent', []), ('absent', [])]
    one = volume_specs(dict(base, capacity='1GiB', attachments=[{'vm': 'web', 'dev': 'vdb'}],
                            volumes=[{'name': 'a'}, {'name': 'b', 'attachments': []}]), backend)
    assert [len(s['attachments']) for s in one] == [1, 0]


def test_an_xml_item_refuses_top_level_definition_options_but_takes_the_state():
    xml = "<domain type='qemu'><name>x</name><memory unit='KiB'>65536</memory><os><type>hvm</type></os></domain>"
    with pytest.raises(InvalidDeclaration) as err:
        vm_fleet({'vcpus': 2, 'vms': [{'name': 'a'}, {'name': 'x', 'xml': xml}]})
    assert err.value.field == 'vms[1].xml' and 'vcpus' in err.value.reason
    assert [state for state, _spec in vm_fleet({'state': 'running', 'vms': [{'name': 'x', 'xml': xml}]})] == ['running']
