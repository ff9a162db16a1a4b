"""Property-based fuzzing of the arguments of migration, migration_info and host (hypothesis).

Same rules as test_fuzz_vm.py: one corrupted field per case, the module runs
in-process against two real private libvirt hosts and must fail cleanly naming
the field; afterwards neither host changed (domains, pools, volumes, networks,
secrets: a drain mark is a libvirt secret).  A last property feeds hostile
drain reasons (XML, Jinja, shell metacharacters, unicode) through host: they
are stored and read back verbatim, and undraining restores the host.

Backends: ``TARGETS`` maps a backend to the fixture giving its base arguments
and world snapshot; adding ``kubevirt`` (migration, migration_info and host
take ``backend: kubevirt``) is one entry with the kube_module_server
kubeconfig and ``kube_world``.
"""

# pylint: disable=redefined-outer-name

import os

import libvirt
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.converge.virt.plugins.modules import host as host_module
from ansible_collections.converge.virt.plugins.modules import migration as migration_module
from ansible_collections.converge.virt.plugins.modules import migration_info as migration_info_module

from tests.reliability.fuzzing import (Tally, assert_clean_failure, bad_dicts, bad_text, bad_types, libvirt_world, noise, not_boolean, run_main,
                                       traversal, world_diff)

EXAMPLES = 5000 if os.environ.get('RELIABILITY_LONG') == '1' else 500
SETTINGS = dict(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TALLY = Tally()


class LibvirtTarget:
    """The libvirt backend: source and destination are the two private hosts."""

    name = 'libvirt'

    def __init__(self, hosts):
        self.hosts = hosts
        self.conns = [libvirt.open(h.uri) for h in hosts]

    def migration_args(self, **extra):
        args = {'uri': self.hosts[0].uri, 'target_uri': self.hosts[1].uri, 'name': 'fuzz-vm'}
        args.update(extra)
        return args

    def info_args(self, **extra):
        args = {'uri': self.hosts[0].uri}
        args.update(extra)
        return args

    def host_args(self, **extra):
        args = {'uri': self.hosts[1].uri}
        args.update(extra)
        return args

    def world(self):
        return [libvirt_world(c) for c in self.conns]

    def close(self):
        for conn in self.conns:
            conn.close()


def libvirt_target(request):
    return LibvirtTarget(request.getfixturevalue('libvirt_hosts'))


TARGETS = {'libvirt': libvirt_target}   # kubevirt: add its target here (backend: kubevirt, kube_module_server)


@pytest.fixture(scope='module', params=sorted(TARGETS))
def target(request):
    tgt = TARGETS[request.param](request)
    before = tgt.world()
    yield tgt
    after = tgt.world()
    tgt.close()
    TALLY.record(world_changed=after != before)
    assert after == before, 'the fuzzed modules changed the %s world: %s' % (
        tgt.name, '; '.join(world_diff(b, a) for b, a in zip(before, after) if b != a))


bad_vm_name = st.one_of(traversal.filter(lambda v: '/' in v or '\x00' in v), bad_text.filter(lambda v: '/' in v or any(ord(c) < 32 for c in v)),
                        st.sampled_from(['', 'a/b', 'vm\n', '\x00']))
not_a_number = noise.filter(lambda v: not any(c.isdigit() for c in v))
MIGRATION_CORRUPTIONS = st.one_of(
    st.tuples(st.just({'name': None}), st.just('names'), bad_vm_name.map(lambda n: ['ok-vm', n]), st.just('names[1]')),
    st.tuples(st.just({}), st.just('name'), bad_vm_name, st.just('name')),
    st.tuples(st.just({'name': None}), st.just('names'), st.just(['twice', 'twice']), st.just('names')),
    st.tuples(st.just({'name': None, 'state': 'started'}), st.just('names'), st.just(['ok-vm']), st.just('names')),
    st.tuples(st.just({}), st.sampled_from(['bandwidth', 'max_downtime', 'completion_timeout']), st.integers(max_value=0), st.just(None)),
    st.tuples(st.just({}), st.sampled_from(['bandwidth', 'max_downtime', 'completion_timeout', 'wait_timeout', 'parallel']), not_a_number,
              st.just(None)),
    st.tuples(st.just({}), st.just('wait_timeout'), st.integers(max_value=-1), st.just('wait_timeout')),
    st.tuples(st.just({}), st.just('parallel'), st.integers(max_value=0), st.just('parallel')),
    st.tuples(st.just({}), st.sampled_from(['mode', 'completion_action', 'state', 'backend']), noise.filter(
        lambda v: v not in ('live', 'offline', 'abort', 'postcopy', 'finished', 'started', 'cancelled', 'libvirt', 'kubevirt')), st.just(None)),
    st.tuples(st.just({}), st.sampled_from(['auto_converge', 'copy_storage', 'peer_to_peer', 'persistent', 'post_copy', 'undefine_source']),
              st.one_of(noise.filter(not_boolean), bad_types), st.just(None)),
    st.tuples(st.just({'mode': 'offline'}), st.sampled_from(['post_copy', 'auto_converge', 'copy_storage']), st.just(True), st.just(None)),
    st.tuples(st.just({'mode': 'offline'}), st.just('persistent'), st.just(False), st.just('persistent')),
    st.tuples(st.just({'post_copy': False}), st.just('completion_action'), st.just('postcopy'), st.just('completion_action')),
    st.tuples(st.just({'target_uri': None}), st.just('target_uris'), st.just([]), st.just('target_uris')),
    st.tuples(st.just({'target_uri': None}), st.just('target_uris'), st.just(['qemu:///a', 'qemu:///b']), st.just('target_uris')),
    st.tuples(st.just({'target_uri': None}), st.just('state'), st.sampled_from(['finished', 'started']), st.just('target_uri')),
)


@settings(**SETTINGS)
@given(check_mode=st.booleans(), corruption=MIGRATION_CORRUPTIONS)
def test_migration_bad_arguments_fail_cleanly_naming_the_field(target, check_mode, corruption):
    base, field, value, shown = corruption
    args = target.migration_args()
    args.update(base)
    args[field] = value
    args = dict((k, v) for k, v in args.items() if v is not None)
    with TALLY.case('migration arguments (%s)' % target.name):
        assert_clean_failure(run_main(migration_module, args, check_mode=check_mode), shown or field, args)


INFO_CORRUPTIONS = st.one_of(
    st.tuples(st.sampled_from(['name', 'uris']), bad_dicts),
    st.tuples(st.just('backend'), noise.filter(lambda v: v not in ('libvirt', 'kubevirt'))),
    st.tuples(st.just('name'), st.integers().map(lambda i: {'n': i})),
)


@settings(**SETTINGS)
@given(corruption=INFO_CORRUPTIONS)
def test_migration_info_bad_arguments_fail_cleanly(target, corruption):
    field, value = corruption
    args = target.info_args()
    args[field] = value
    with TALLY.case('migration_info arguments (%s)' % target.name):
        assert_clean_failure(run_main(migration_info_module, args), field, args)


HOST_CORRUPTIONS = st.one_of(
    st.tuples(st.sampled_from(['state', 'backend']), noise.filter(lambda v: v not in ('drained', 'active', 'present', 'libvirt', 'kubevirt'))),
    st.tuples(st.just('taint'), st.one_of(noise.filter(not_boolean), bad_types)),
    st.tuples(st.just('node'), noise),
)


@settings(**SETTINGS)
@given(state=st.sampled_from(['drained', 'active', 'present']), corruption=HOST_CORRUPTIONS)
def test_host_bad_arguments_fail_cleanly(target, state, corruption):
    field, value = corruption
    args = target.host_args(state=state)
    args[field] = value
    with TALLY.case('host arguments (%s)' % target.name):
        assert_clean_failure(run_main(host_module, args), field, args)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(reason=st.one_of(noise, bad_text))
def test_host_hostile_drain_reason_round_trips_verbatim(target, reason):
    with TALLY.case('host drain reason round trip (%s)' % target.name):
        drained = run_main(host_module, target.host_args(state='drained', reason=reason))
        assert drained.get('changed') and not drained.get('failed'), drained
        assert drained['host']['drain']['reason'] == reason
        again = run_main(host_module, target.host_args(state='present'))
        assert again['host']['drain']['reason'] == reason and not again['changed']
        undrained = run_main(host_module, target.host_args(state='active'))
        assert undrained.get('changed') and undrained['host']['drain'] is None, undrained
