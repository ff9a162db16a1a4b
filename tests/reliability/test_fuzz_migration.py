"""Property-based fuzzing of the arguments of migration, migration_info and host (hypothesis).

Same rules as test_fuzz_vm.py: one corrupted field per case, the module runs
in-process against two real private libvirt hosts and must fail cleanly naming
the field; afterwards neither host changed (domains, pools, volumes, networks,
secrets: a drain mark is a libvirt secret).  A last property feeds hostile
drain reasons (XML, Jinja, shell metacharacters, unicode) through host: they
are stored and read back verbatim, and undraining restores the host.

Backends: ``TARGETS`` maps a backend to the fixture giving its base arguments
and world snapshot: two private libvirt hosts, or the Kubernetes API test
server (every object byte-identical afterwards, ``kube_world``).
"""

# pylint: disable=redefined-outer-name

import json
import os
import re

import libvirt
import pytest
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st

from ansible_collections.converge.virt.plugins.modules import host as host_module
from ansible_collections.converge.virt.plugins.modules import migration as migration_module
from ansible_collections.converge.virt.plugins.modules import migration_info as migration_info_module

from tests.reliability.fuzzing import (Tally, assert_clean_failure, bad_dicts, bad_text, bad_types, libvirt_world, noise, not_boolean, run_main,
                                       traversal, world_diff, kube_world)

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


class KubevirtTarget:
    """The kubevirt backend: the API test server (VM fuzz-vm does not exist; node02 is the node drained)."""

    name = 'kubevirt'

    def __init__(self, srv):
        self.srv = srv

    def _base(self, extra):
        args = {'backend': 'kubevirt', 'kubeconfig': self.srv.kubeconfig_path}
        args.update(extra)
        return args

    def migration_args(self, **extra):
        return self._base(dict({'namespace': 'default', 'name': 'fuzz-vm'}, **extra))

    def info_args(self, **extra):
        return self._base(dict({'namespace': 'default'}, **extra))

    def host_args(self, **extra):
        return self._base(dict({'node': 'node02'}, **extra))

    def world(self):
        return kube_world(self.srv)

    def close(self):
        pass


def kubevirt_target(request):
    return KubevirtTarget(request.getfixturevalue('kube_module_server'))


TARGETS = {'libvirt': libvirt_target, 'kubevirt': kubevirt_target}


@pytest.fixture(scope='module', params=sorted(TARGETS))
def target(request):
    tgt = TARGETS[request.param](request)
    before = tgt.world()
    yield tgt
    after = tgt.world()
    tgt.close()
    if tgt.name == 'kubevirt':
        # the drain round trip writes the node twice (cordon, uncordon): compare the objects, not the write counter
        old, new = _kube_objects(before[1]), _kube_objects(after[1])
        TALLY.record(world_changed=old != new)
        if old != new:
            changed = sorted('%s %s' % (kind, name) for kind in set(old) | set(new)
                             for name in set(old.get(kind, {})) | set(new.get(kind, {})) if old.get(kind, {}).get(name) != new.get(kind, {}).get(name))
            raise AssertionError('the fuzzed modules changed the kubevirt world: %s' % ', '.join(changed))
    else:
        TALLY.record(world_changed=after != before)
        assert after == before, 'the fuzzed modules changed the %s world: %s' % (
            tgt.name, '; '.join(world_diff(b, a) for b, a in zip(before, after) if b != a))


def _kube_objects(raw):
    """The API server's objects without the write bookkeeping a restored object keeps (resourceVersion, generation, empty maps)."""
    objects = json.loads(raw)
    for bucket in objects.values():
        for obj in bucket.values():
            meta = obj.get('metadata') or {}
            for key in ('resourceVersion', 'generation'):
                meta.pop(key, None)
            for key in ('annotations', 'labels'):
                if meta.get(key) == {}:
                    meta.pop(key)
    return objects


def _kube_ref(value):
    """Whether ``value`` is a valid ``name`` or ``namespace/name`` of Kubernetes objects."""
    return bool(re.fullmatch(r'([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*', value))


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
    # without target_uri a libvirt migration is refused; on kubevirt no target is needed (KubeVirt picks a node)
    assume(not (target.name == 'kubevirt' and base == {'target_uri': None} and field == 'state'))
    # 'a/b' is not a libvirt VM name but is a valid namespace/name entry on kubevirt
    assume(not (target.name == 'kubevirt' and field == 'names' and isinstance(value, list) and len(set(value)) == len(value)
                and all(_kube_ref(v) for v in value)))
    args = target.migration_args()
    args.update(base)
    args[field] = value
    args = dict((k, v) for k, v in args.items() if v is not None)
    named = [shown or field]
    if target.name == 'kubevirt':
        # a libvirt-only base (mode offline, ...) is itself refused on kubevirt, naming that option
        named += [key for key, val in base.items() if val is not None]
    with TALLY.case('migration arguments (%s)' % target.name):
        assert_clean_failure(run_main(migration_module, args, check_mode=check_mode), named, args)


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
@example(state='drained', corruption=('node', '..'))  # found by a CI run: GET /api/v1/nodes/.. is the node list
@example(state='active', corruption=('node', 'a/../b'))
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
