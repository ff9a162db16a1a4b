"""Property-based fuzzing of the arguments of volume and volume_info (hypothesis).

Same rules as test_fuzz_vm.py: one corrupted field per case (path traversal
in names, pools and paths; XML, Jinja and shell metacharacters; absurd sizes
and units; unicode; wrong types), the module runs in-process and must fail
cleanly naming the field; afterwards the host is unchanged (the declared pool
does not exist, so an accepted input would show up as a new pool or volume).

Backends: ``TARGETS`` maps a backend to the fixture giving its base arguments
and world snapshot: the libvirt backend on a private host, the kubevirt backend
on the Kubernetes API test server (``kube_world``: every object byte-identical).
"""

# pylint: disable=redefined-outer-name

import os
import re

import libvirt
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from ansible_collections.converge.virt.plugins.modules import volume as volume_module
from ansible_collections.converge.virt.plugins.modules import volume_info as volume_info_module

from tests.reliability.fuzzing import (Tally, assert_clean_failure, bad_dicts, bad_sizes, bad_text, bad_types, kube_world, libvirt_world, noise,
                                       not_boolean, run_main, traversal, world_diff)

EXAMPLES = 5000 if os.environ.get('RELIABILITY_LONG') == '1' else 500
SETTINGS = dict(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TALLY = Tally()
POOL = 'fuzzpool'


class LibvirtTarget:
    """The libvirt backend: a private host where pool ``fuzzpool`` does not exist."""

    name = 'libvirt'

    def __init__(self, host, pool_path):
        self.host = host
        self.pool_path = pool_path
        self.conn = libvirt.open(host.uri)

    def volume_args(self, **extra):
        args = {'uri': self.host.uri, 'pool': POOL, 'pool_path': self.pool_path, 'name': 'fuzz.raw', 'capacity': '1MiB'}
        args.update(extra)
        return args

    def info_args(self, **extra):
        args = {'uri': self.host.uri}
        args.update(extra)
        return args

    def world(self):
        return libvirt_world(self.conn)

    def close(self):
        self.conn.close()


def libvirt_target(request, tmp_path_factory):
    host = request.getfixturevalue('libvirt_hosts')[1]
    return LibvirtTarget(host, str(tmp_path_factory.mktemp('fuzzpool')))


class KubevirtTarget:
    """The kubevirt backend: the API test server; the libvirt-only options are refused there, naming them."""

    name = 'kubevirt'

    def __init__(self, srv):
        self.srv = srv

    def volume_args(self, **extra):
        args = {'backend': 'kubevirt', 'kubeconfig': self.srv.kubeconfig_path, 'namespace': 'default', 'name': 'fuzz-vol', 'capacity': '1Gi'}
        args.update(extra)
        return args

    def info_args(self, **extra):
        args = {'backend': 'kubevirt', 'kubeconfig': self.srv.kubeconfig_path, 'namespace': 'default'}
        args.update(extra)
        return args

    def world(self):
        return kube_world(self.srv)

    def close(self):
        pass


def kubevirt_target(request, tmp_path_factory):  # pylint: disable=unused-argument
    return KubevirtTarget(request.getfixturevalue('kube_module_server'))


TARGETS = {'libvirt': libvirt_target, 'kubevirt': kubevirt_target}


@pytest.fixture(scope='module', params=sorted(TARGETS))
def target(request, tmp_path_factory):
    tgt = TARGETS[request.param](request, tmp_path_factory)
    before = tgt.world()
    yield tgt
    after = tgt.world()
    tgt.close()
    TALLY.record(world_changed=after != before)
    assert after == before, 'the fuzzed modules changed the %s world: %s' % (tgt.name, world_diff(before, after) if tgt.name == 'libvirt' else after[0])


not_a_path = st.one_of(st.sampled_from(['relative/dir', 'x', '~/pool', '', '../pool']), noise.filter(lambda s: not s.startswith('/')))
hostile_abs_path = st.one_of(traversal.filter(lambda p: p.startswith('/') and '..' in p), noise.map(lambda s: '/tmp/' + s + '/../x'),
                             st.sampled_from(['\x00', '\n', '\x1b', '\r']).map(lambda c: '/tmp/fuzz' + c + 'pool'))
bad_name = st.one_of(traversal, bad_text, st.sampled_from(['', '.', '..', '-lead', 'a\n', 'a/b']))
# a serial may hold spaces (libvirt's rule: letters, digits, _.+- and space, at most 64): only other characters make it bad
bad_serials = bad_text.filter(lambda s: not re.fullmatch(r'[A-Za-z0-9_.+ -]{1,64}', s))
bad_dev = st.one_of(st.sampled_from(['', 'vd', 'vda1', '../etc/passwd', 'sdA', 'nvme0n1', 'vdb\n']), noise.map(lambda s: 'vd' + s + '!'))


# (field in the arguments, value, what the message must name)
VOLUME_CORRUPTIONS = st.one_of(
    st.tuples(st.just('name'), bad_name, st.just('name')),
    st.tuples(st.just('pool'), bad_name, st.just('pool')),
    st.tuples(st.just('pool_path'), st.one_of(not_a_path, hostile_abs_path), st.just('pool_path')),
    st.tuples(st.just('capacity'), bad_sizes.filter(lambda v: not isinstance(v, int) or v <= 0 or v > 2 ** 62), st.just('capacity')),
    st.tuples(st.sampled_from(['format', 'import_format', 'preallocation']), noise.filter(lambda v: v not in ('raw', 'qcow2', 'off', 'metadata', 'full')),
              st.just(None)),
    # malformed references, and well-formed ones naming a volume that does not exist (refused before the pool is made)
    st.tuples(st.sampled_from(['clone_from', 'backing_volume']),
              st.one_of(bad_name.filter(lambda v: v != ''), st.just('fuzzpool/fuzz.raw'), st.just('default/absent.qcow2')),
              st.just(None)),
    st.tuples(st.just('import_from'), st.one_of(not_a_path.filter(lambda v: v != ''), st.just('/tmp/x\x00.img')), st.just('import_from')),
    st.tuples(st.just('state'), noise.filter(lambda v: v not in ('present', 'absent')), st.just('state')),
    st.tuples(st.just('wipe'), st.one_of(noise.filter(not_boolean), bad_types), st.just('wipe')),
    st.tuples(st.just('detach_timeout'), st.integers(max_value=-1), st.just('detach_timeout')),
    st.tuples(st.just('attachments'), bad_name.filter(lambda v: '/' in v or '\n' in v or '\x00' in v or v == '').map(lambda v: [{'vm': v, 'dev': 'vdb'}]),
              st.just('attachments[0]')),
    st.tuples(st.just('attachments'), bad_dev.map(lambda d: [{'vm': 'fuzz-vm', 'dev': d}]), st.just('attachments[0]')),
    st.tuples(st.just('attachments'), noise.filter(lambda v: v not in ('virtio', 'scsi', 'sata', 'ide', 'usb')).map(
        lambda b: [{'vm': 'fuzz-vm', 'dev': 'vdb', 'bus': b}]), st.just('bus')),
    st.tuples(st.just('attachments'), bad_serials.map(lambda s: [{'vm': 'fuzz-vm', 'dev': 'vdb', 'serial': s}]), st.just('attachments[0].serial')),
    st.tuples(st.just('attachments'), st.sampled_from([[{'vm': 'fuzz-vm', 'dev': 'vdb'}, {'vm': 'fuzz-vm', 'dev': 'vdb'}]]), st.just('attachments')),
    st.tuples(st.just('volumes'), bad_name.map(lambda n: [{'name': n}]), st.just('volumes[0].name')),
    st.tuples(st.just('volumes'), bad_sizes.filter(lambda v: not isinstance(v, int) or v <= 0 or v > 2 ** 62).map(
        lambda c: [{'name': 'ok.raw', 'capacity': c}]), st.just('volumes[0].capacity')),
    st.tuples(st.just('volumes'), st.just([{'name': 'twice.raw'}, {'name': 'twice.raw'}]), st.just('volumes')),
)


@settings(**SETTINGS)
@given(state=st.sampled_from(['present', 'absent']), check_mode=st.booleans(), corruption=VOLUME_CORRUPTIONS)
def test_volume_bad_arguments_fail_cleanly_naming_the_field(target, state, check_mode, corruption):
    field, value, shown = corruption
    # on kubevirt ``dev`` is the disk name in the VM: a DNS label such as 'vd' is valid there
    assume(not (target.name == 'kubevirt' and field == 'attachments' and len(value) == 1 and set(value[0]) == {'vm', 'dev'}
                and re.fullmatch(r'[a-z0-9]([-a-z0-9]*[a-z0-9])?', value[0]['dev'])))
    args = target.volume_args(state=state)
    if field in ('attachments', 'clone_from', 'backing_volume', 'import_from', 'import_format'):
        args['state'] = 'present'
    if field == 'import_format':
        args['import_from'] = '/tmp/fuzz-source.img'
    if field == 'volumes':
        args.pop('name')
    args[field] = value
    with TALLY.case('volume arguments (%s)' % target.name):
        assert_clean_failure(run_main(volume_module, args, check_mode=check_mode), shown or field, args)


INFO_CORRUPTIONS = st.one_of(
    st.tuples(st.just('pool'), bad_name.filter(lambda v: v != ''), st.just('pool')),
    st.tuples(st.just('pool'), bad_types, st.just('pool')),
    st.tuples(st.just('name'), bad_dicts, st.just('name')),
    st.tuples(st.just('name'), st.lists(noise, min_size=1, max_size=3), st.just('name')),   # names without a pool (libvirt only: kubevirt has none)
    st.tuples(st.just('backend'), noise.filter(lambda v: v not in ('libvirt', 'kubevirt')), st.just('backend')),
)


@settings(**SETTINGS)
@given(corruption=INFO_CORRUPTIONS)
def test_volume_info_bad_arguments_fail_cleanly(target, corruption):
    field, value, shown = corruption
    assume(not (target.name == 'kubevirt' and field == 'name' and isinstance(value, list)))
    args = target.info_args()
    args[field] = value
    with TALLY.case('volume_info arguments (%s)' % target.name):
        assert_clean_failure(run_main(volume_info_module, args), shown, args)
