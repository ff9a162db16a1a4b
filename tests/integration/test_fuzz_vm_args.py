"""Property-based fuzzing of the vm module's arguments (hypothesis).

Each case starts from a valid declaration and corrupts one field with an
invalid value: XML, Jinja and shell metacharacters where they are not allowed,
path traversal, absurd sizes and units, unicode, wrong types. The module runs
in-process (AnsibleModule reads its arguments as under ansible) against a real
private libvirt host. Every case must fail cleanly, naming the field, with no
traceback; after all cases no domain was defined or changed.
"""

import contextlib
import io
import json
import re

import libvirt
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible.module_utils import basic

from ansible_collections.converge.virt.plugins.modules import vm as vm_module
from ansible_collections.converge.virt.plugins.modules import vm_info as vm_info_module
from ansible_collections.converge.virt.plugins.modules import reconcile as reconcile_module

CASES = {'vm': 0}
METACHARS = ['<', '>', '&', '"', "'", '{{', '}}', '{%', '$(', '`', ';', '|', '\\', '\n', '\x00', '\u202e', '\U0001f4a3', '../']


def run_main(module, args):
    basic._ANSIBLE_ARGS = json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode()  # pylint: disable=protected-access
    basic._ANSIBLE_PROFILE = 'legacy'  # pylint: disable=protected-access
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            module.main()
        except SystemExit:
            pass
    return json.loads(out.getvalue())


def world(conn):
    return sorted((dom.name(), dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)) for dom in conn.listAllDomains(0))


@pytest.fixture(scope='module')
def fuzz_host(libvirt_hosts):
    conn = libvirt.open(libvirt_hosts[1].uri)
    before = world(conn)
    yield libvirt_hosts[1]
    assert world(conn) == before, 'the fuzzed module changed the world'
    conn.close()


noise = st.lists(st.sampled_from(METACHARS) | st.characters(blacklist_categories=('Cs',)), min_size=1, max_size=8).map(''.join)
bad_sizes = st.one_of(
    st.sampled_from(['lots', '-5MiB', '0', '0MiB', '999999999TiB', '1e99', '12 parsecs', '５１２MiB', 'MiB', '1..5GiB', '0x10MiB', '']),
    st.integers(max_value=0), st.integers(min_value=2 ** 60), noise.map(lambda s: 'x' + s))
DEV_RE = re.compile(r'^(vd|sd|hd|xvd)[a-z]{1,3}$')
bad_dev = st.one_of(st.sampled_from(['', 'vd', 'vda1', '../etc/passwd', 'sdA', 'xvd' + 'a' * 5, 'nvme0n1']),
                    noise.map(lambda s: 'vd' + s).filter(lambda d: not DEV_RE.match(d)))
bad_path = st.one_of(st.sampled_from(['relative/disk.img', '../../etc/shadow', 'disk.qcow2', '~/x.img', '']), noise.filter(lambda s: not s.startswith('/')))
bad_mac = st.one_of(st.sampled_from(['zz:zz:zz:zz:zz:zz', '52:54:00:00:00', '52-54-00-00-00-01', '']), noise)

CORRUPTIONS = st.one_of(
    st.tuples(st.just('name'), st.one_of(st.just(''), noise.map(lambda s: s + '/../x'), st.text(st.sampled_from(['\x00', '\x01', '\x1b']), min_size=1)),
              st.just(None)),
    st.tuples(st.just('memory'), bad_sizes, st.just(None)),
    st.tuples(st.just('vcpus'), st.one_of(st.integers(max_value=0), st.integers(min_value=4097, max_value=10 ** 12), noise), st.just(None)),
    st.tuples(st.just('disks'), bad_dev.map(lambda d: [{'dev': d, 'path': '/var/lib/libvirt/images/x.img'}]), st.just('disks[0]')),
    st.tuples(st.just('disks'), bad_path.map(lambda p: [{'dev': 'vdb', 'path': p}]), st.just('disks[0]')),
    st.tuples(st.just('disks'), st.sampled_from(['vmdk', 'qed', 'raw;rm -rf /', '{{ x }}']).map(
        lambda f: [{'dev': 'vdb', 'path': '/x.img', 'format': f}]), st.just('disks[0]')),
    st.tuples(st.just('interfaces'), bad_mac.map(lambda m: [{'network': 'default', 'mac': m}]), st.just('interfaces[0]')),
    st.tuples(st.just('boot'), bad_path.map(lambda p: {'kernel': p}), st.just('boot')),
    st.tuples(st.just('serial'), bad_path.filter(lambda p: p not in ('pty', 'none')), st.just(None)),
    st.tuples(st.just('uuid'), st.one_of(st.just('not-a-uuid'), noise), st.just(None)),
    st.tuples(st.just('title'), noise.map(lambda s: s + '\nsecond line'), st.just(None)),
    st.tuples(st.just('state'), noise.filter(lambda v: v not in ('present', 'running', 'stopped', 'paused', 'suspended', 'restarted', 'absent')),
              st.just(None)),
    st.tuples(st.sampled_from(['shutdown_timeout', 'wait_timeout', 'lock_timeout']), st.integers(max_value=-1), st.just(None)),
    st.tuples(st.just('domain_type'), noise.filter(lambda v: v not in ('kvm', 'qemu')), st.just(None)),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(state=st.sampled_from(['present', 'running', 'stopped', 'absent', 'paused']), corruption=CORRUPTIONS)
def test_vm_bad_arguments_fail_cleanly_naming_the_field(fuzz_host, state, corruption):
    field, value, shown = corruption
    args = {'uri': fuzz_host.uri, 'name': 'fuzz-vm', 'memory': '64MiB', 'domain_type': 'qemu', 'state': state}
    args[field] = value
    result = run_main(vm_module, args)
    CASES['vm'] += 1
    assert result.get('failed'), (args, result)
    assert (shown or field) in result['msg'], (field, result['msg'])
    assert 'Traceback' not in json.dumps(result)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(['name', 'status', 'vm_state']), value=st.dictionaries(noise, noise | st.integers(), min_size=1))
def test_vm_info_bad_types_fail_cleanly(fuzz_host, field, value):
    result = run_main(vm_info_module, {'uri': fuzz_host.uri, field: value})
    assert result.get('failed') and field in result['msg'] and 'Traceback' not in json.dumps(result)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.integers(max_value=-1))
def test_reconcile_negative_timeout_refused(fuzz_host, value):
    result = run_main(reconcile_module, {'uri': fuzz_host.uri, 'fix': True, 'shutdown_timeout': value})
    assert result.get('failed') and 'shutdown_timeout' in result['msg']
