"""Property-based fuzzing of the arguments of vm (libvirt and kubevirt), vm_info and reconcile (hypothesis).

Each case starts from a valid declaration and corrupts one field with an
invalid value: XML, Jinja and shell metacharacters where they are not allowed,
path traversal, absurd sizes and units, unicode, wrong types.  The module runs
in-process (AnsibleModule reads its arguments as under ansible) against a real
private libvirt host or the Kubernetes API test server.  Every case must fail
cleanly, naming the field, with no traceback; after all cases nothing on the
host (domains, pools, volumes, networks, secrets) or in the API server (every
object, byte for byte, and its resourceVersion counter) changed.

Formerly tests/integration/test_fuzz_vm_args.py (its cases are kept here).
"""

# pylint: disable=redefined-outer-name

import os
import re

import libvirt
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.converge.virt.plugins.modules import reconcile as reconcile_module
from ansible_collections.converge.virt.plugins.modules import vm as vm_module
from ansible_collections.converge.virt.plugins.modules import vm_info as vm_info_module

from tests.reliability.fuzzing import (Tally, assert_clean_failure, bad_dicts, bad_sizes, bad_text, bad_types, kube_world, kube_write_mark,
                                       kube_writes_since, libvirt_world, noise, not_boolean, run_main, traversal, world_diff)

EXAMPLES = 5000 if os.environ.get('RELIABILITY_LONG') == '1' else 500
SETTINGS = dict(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TALLY = Tally()        # cases against the libvirt host
KUBE_TALLY = Tally()   # cases against the API test server
VM_STATES = ('present', 'running', 'stopped', 'paused', 'suspended', 'restarted', 'absent')


@pytest.fixture(scope='module')
def fuzz_host(libvirt_hosts):
    conn = libvirt.open(libvirt_hosts[1].uri)
    before = libvirt_world(conn)
    yield libvirt_hosts[1]
    after = libvirt_world(conn)
    conn.close()
    TALLY.record(world_changed=after != before)
    assert after == before, 'the fuzzed modules changed the libvirt host: ' + world_diff(before, after)


@pytest.fixture(scope='module')
def fuzz_kube(kube_module_server):
    srv = kube_module_server
    srv.controller.settle()
    before = kube_world(srv)
    yield srv
    after = kube_world(srv)
    KUBE_TALLY.record(world_changed=after != before)
    assert after == before, 'the fuzzed modules changed the objects of the API server: %s' % kube_writes_since(srv, before[0])


bad_dev = st.one_of(st.sampled_from(['', 'vd', 'vda1', '../etc/passwd', 'sdA', 'xvd' + 'a' * 5, 'nvme0n1']),
                    noise.map(lambda s: 'vd' + s).filter(lambda d: not re.match(r'^(vd|sd|hd|xvd)[a-z]{1,3}$', d)))
bad_path = st.one_of(st.sampled_from(['relative/disk.img', '../../etc/shadow', 'disk.qcow2', '~/x.img', '']), noise.filter(lambda s: not s.startswith('/')))
not_a_number = noise.filter(lambda v: not any(c.isdigit() for c in v))  # ansible turns ' 1' into 1
bad_mac = st.one_of(st.sampled_from(['zz:zz:zz:zz:zz:zz', '52:54:00:00:00', '52-54-00-00-00-01', '']), noise)

LIBVIRT_CORRUPTIONS = st.one_of(
    st.tuples(st.just('name'), st.one_of(st.just(''), noise.map(lambda s: s + '/../x'), st.text(st.sampled_from(['\x00', '\x01', '\x1b']), min_size=1)),
              st.just(None)),
    st.tuples(st.just('memory'), bad_sizes, st.just(None)),
    st.tuples(st.just('vcpus'), st.one_of(st.integers(max_value=0), st.integers(min_value=4097, max_value=10 ** 12), not_a_number), st.just(None)),
    st.tuples(st.just('disks'), bad_dev.map(lambda d: [{'dev': d, 'path': '/var/lib/libvirt/images/x.img'}]), st.just('disks[0]')),
    st.tuples(st.just('disks'), bad_path.map(lambda p: [{'dev': 'vdb', 'path': p}]), st.just('disks[0]')),
    st.tuples(st.just('disks'), st.sampled_from(['vmdk', 'qed', 'raw;rm -rf /', '{{ x }}']).map(
        lambda f: [{'dev': 'vdb', 'path': '/x.img', 'format': f}]), st.just('disks[0]')),
    st.tuples(st.just('disks'), st.one_of(traversal, bad_text).filter(lambda v: '/' in v or v in ('.', '..') or any(ord(c) < 32 for c in v)).map(
        lambda v: [{'dev': 'vdb', 'pool': 'default', 'volume': v}]), st.just('disks[0]')),
    st.tuples(st.just('interfaces'), bad_mac.map(lambda m: [{'network': 'default', 'mac': m}]), st.just('interfaces[0]')),
    st.tuples(st.just('boot'), bad_path.map(lambda p: {'kernel': p}), st.just('boot')),
    st.tuples(st.just('serial'), bad_path.filter(lambda p: p not in ('pty', 'none')), st.just(None)),
    st.tuples(st.just('uuid'), st.one_of(st.just('not-a-uuid'), noise), st.just(None)),
    st.tuples(st.just('title'), noise.map(lambda s: s + '\nsecond line'), st.just(None)),
    st.tuples(st.just('state'), noise.filter(lambda v: v not in VM_STATES), st.just(None)),
    st.tuples(st.sampled_from(['shutdown_timeout', 'wait_timeout', 'lock_timeout']), st.integers(max_value=-1), st.just(None)),
    st.tuples(st.just('domain_type'), noise.filter(lambda v: v not in ('kvm', 'qemu')), st.just(None)),
    st.tuples(st.sampled_from(['instancetype', 'preference']), noise, st.just(None)),
)


@settings(**SETTINGS)
@given(state=st.sampled_from(['present', 'running', 'stopped', 'absent', 'paused']), corruption=LIBVIRT_CORRUPTIONS)
def test_vm_bad_arguments_fail_cleanly_naming_the_field(fuzz_host, state, corruption):
    field, value, shown = corruption
    args = {'uri': fuzz_host.uri, 'name': 'fuzz-vm', 'memory': '64MiB', 'domain_type': 'qemu', 'state': state}
    args[field] = value
    with TALLY.case('vm arguments (libvirt)'):
        assert_clean_failure(run_main(vm_module, args), shown or field, args)


def kube_args(srv, **extra):
    args = {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': 'default', 'name': 'fuzz-vm', 'memory': '64Mi',
            'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}], 'wait_timeout': 5}
    args.update(extra)
    return args


not_dns_label = st.one_of(bad_text, st.sampled_from(['', 'UPPER', '-lead', 'trail-', 'a_b', 'a.b/c', '..', 'x' * 64]))
KUBE_CORRUPTIONS = st.one_of(
    st.tuples(st.just('name'), not_dns_label.filter(lambda v: v != ''), st.just(None)),
    st.tuples(st.just('namespace'), not_dns_label.filter(lambda v: v != ''), st.just(None)),
    st.tuples(st.just('memory'), bad_sizes, st.just(None)),
    st.tuples(st.just('vcpus'), st.one_of(st.integers(max_value=0), not_a_number), st.just(None)),
    st.tuples(st.just('state'), st.one_of(st.just('suspended'), noise.filter(lambda v: v not in VM_STATES)), st.just(None)),
    st.tuples(st.just('disks'), not_dns_label.filter(lambda v: v != '').map(lambda n: [{'name': n, 'image': 'quay.io/x'}]), st.just('disks[0]')),
    st.tuples(st.just('disks'), st.sampled_from([{}, {'image': 'a', 'claim': 'b'}, {'name': 'root'}]).map(lambda d: [d]), st.just('disks[0]')),
    st.tuples(st.just('disks'), traversal.map(lambda p: [{'name': 'root', 'path': p}]), st.just('disks[0]')),
    st.tuples(st.just('interfaces'), st.one_of(noise.filter(lambda v: v not in ('pod', 'default')).map(lambda n: [{'network': n}]),
                                               noise.map(lambda b: [{'bridge': b}])), st.just('interfaces[0]')),
    st.tuples(st.sampled_from(['xml', 'uuid', 'title', 'description', 'machine', 'arch', 'serial', 'on_crash']), noise, st.just(None)),
    st.tuples(st.just('spec'), st.one_of(noise.filter(lambda v: '=' not in v and not v.lstrip().startswith('{')),  # else ansible makes it a dict
                                         st.sampled_from([{'runStrategy': 'Always'}, {'running': True}])), st.just('spec')),
    st.tuples(st.just('data_volume_templates'), st.sampled_from([[{}], [{'metadata': {}}], [{'metadata': {'name': 'x'}, 'spec': 'x'}]]),
              st.just('data_volume_templates[0]')),
    st.tuples(st.sampled_from(['shutdown_timeout', 'wait_timeout', 'lock_timeout']), st.integers(max_value=-1), st.just(None)),
    st.tuples(st.just('labels'), st.one_of(noise.filter(lambda v: '=' not in v and not v.lstrip().startswith('{')), st.lists(noise, min_size=1),
                                           st.dictionaries(bad_text, st.just('x'), min_size=1), st.dictionaries(st.just('app'), bad_text, min_size=1)),
              st.just(None)),
)


@settings(**SETTINGS)
@given(state=st.sampled_from(['present', 'running', 'stopped', 'absent', 'paused']), corruption=KUBE_CORRUPTIONS)
def test_vm_kubevirt_bad_arguments_fail_cleanly_naming_the_field(fuzz_kube, state, corruption):
    field, value, shown = corruption
    args = kube_args(fuzz_kube, state=state)
    args[field] = value
    before = kube_write_mark(fuzz_kube)
    with KUBE_TALLY.case('vm arguments (kubevirt)'):
        assert_clean_failure(run_main(vm_module, args), shown or field, args)
        assert kube_write_mark(fuzz_kube) == before, ('a refused input wrote to the API server', args, kube_writes_since(fuzz_kube, before))


INFO_CORRUPTIONS = st.one_of(
    st.tuples(st.sampled_from(['name', 'status', 'vm_state']), bad_dicts),
    st.tuples(st.just('status'), st.lists(noise.filter(lambda w: w not in ('Running', 'Stopped', 'Paused')), min_size=1, max_size=3)),
    st.tuples(st.just('vm_state'), st.lists(noise.filter(lambda w: w not in ('ACTIVE', 'STOPPED', 'PAUSED')), min_size=1, max_size=3)),
    st.tuples(st.just('backend'), noise.filter(lambda v: v not in ('libvirt', 'kubevirt'))),
    st.tuples(st.just('validate_certs'), noise.filter(not_boolean)),
)


@settings(**SETTINGS)
@given(corruption=INFO_CORRUPTIONS)
def test_vm_info_bad_arguments_fail_cleanly(fuzz_host, corruption):
    field, value = corruption
    args = {'uri': fuzz_host.uri, field: value}
    with TALLY.case('vm_info arguments (libvirt)'):
        assert_clean_failure(run_main(vm_info_module, args), field, args)


RECONCILE_CORRUPTIONS = st.one_of(
    st.tuples(st.just('shutdown_timeout'), st.one_of(st.integers(max_value=-1), not_a_number)),
    st.tuples(st.just('name'), bad_dicts),
    st.tuples(st.sampled_from(['fix', 'accept_running_guests', 'restart_stopped_guests']),
              st.one_of(noise.filter(not_boolean), bad_types)),
)


@settings(**SETTINGS)
@given(corruption=RECONCILE_CORRUPTIONS, fix=st.booleans())
def test_reconcile_bad_arguments_fail_cleanly(fuzz_host, corruption, fix):
    field, value = corruption
    args = {'uri': fuzz_host.uri, 'fix': fix}
    args[field] = value
    with TALLY.case('reconcile arguments (libvirt)'):
        assert_clean_failure(run_main(reconcile_module, args), field, args)
