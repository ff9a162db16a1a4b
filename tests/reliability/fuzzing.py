"""Shared parts of the argument fuzzers (test_fuzz_*.py).

A module runs in-process (AnsibleModule reads its arguments from
``basic._ANSIBLE_ARGS`` exactly as under ansible), which keeps hundreds of
cases per module within seconds.  ``Tally`` counts the cases each fuzzer really
ran and records them as figures when its module of tests ends.

Snapshots of "the world" (``libvirt_world``, ``kube_world``) are compared
before and after every fuzzer: a refused input must not have changed anything.
"""

import contextlib
import io
import json

from hypothesis import strategies as st

from ansible.module_utils import basic
from ansible.module_utils.parsing.convert_bool import boolean

from tests.reliability import figures

# metacharacters of XML, Jinja, shells and paths; control characters, bidi override, astral unicode
METACHARS = ['<', '>', '&', '"', "'", '{{', '}}', '{%', '%}', '$(', '${', '`', ';', '|', '&&', '\\', '\n', '\r', '\t', '\x00', '\x1b', '\u202e',
             '\U0001f4a3', '../', '/..', '*', '?', '#', '%00', '<![CDATA[', ']]>', '<!ENTITY x SYSTEM "file:///etc/passwd">', '&x;']
noise = st.lists(st.sampled_from(METACHARS) | st.characters(blacklist_categories=('Cs',)), min_size=1, max_size=8).map(''.join)
# texts that are never a valid name of anything (each carries at least one metacharacter that no name accepts)
bad_text = st.tuples(noise, st.sampled_from(['<', '>', '{{', '$(', '`', ';', '|', '\n', '\x00', '/', '../', '\u202e', ' ', '&'])).map(
    lambda t: t[0] + t[1] + t[0])
bad_dicts = st.dictionaries(noise, noise | st.integers(), min_size=1, max_size=3)
# a list of dicts is a bad value of a dict or scalar option (ansible turns dicts inside a list of strings into strings)
bad_types = st.one_of(st.dictionaries(noise, noise | st.integers(), min_size=1, max_size=3),
                      st.lists(st.dictionaries(noise, noise, min_size=1), min_size=1, max_size=2))
bad_sizes = st.one_of(
    st.sampled_from(['lots', '-5MiB', '-1', '0', '0MiB', '999999999TiB', '1e99', '12 parsecs', '\uff15\uff11\uff12MiB', 'MiB', '1..5GiB', '0x10MiB', '',
                     '1 MiB; rm -rf /', '{{ 1024 * 1024 }}', '1YiB', '9' * 40, 'NaN', 'inf', '-inf', '1.5.5GiB']),
    st.integers(max_value=-1), st.integers(min_value=2 ** 63), noise.map(lambda s: 'x' + s), bad_types)
traversal = st.sampled_from(['../../etc/shadow', '..', '.', '/etc/passwd', 'a/../../b', '..\\..\\windows', 'pool/../other', '%2e%2e%2f',
                             'x\x00.img', '~root/x'])


def not_boolean(value):
    """Whether ansible refuses ``value`` as a boolean."""
    try:
        boolean(value, strict=True)
    except TypeError:
        return True
    return False


def run_main(module, args, check_mode=False):
    """Run ``module.main()`` in this process with ``args``; return its JSON result (AssertionError if it printed none)."""
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    basic._ANSIBLE_ARGS = json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode()  # pylint: disable=protected-access
    basic._ANSIBLE_PROFILE = 'legacy'  # pylint: disable=protected-access
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            module.main()
        except SystemExit:
            pass
    try:
        return json.loads(out.getvalue())
    except ValueError:
        raise AssertionError('the module printed no JSON result for %r:\n%s' % (args, out.getvalue()[-2000:])) from None


def assert_clean_failure(result, field, args=None):
    """The result failed, its message names ``field`` (a string or one of several), and carries no traceback."""
    fields = (field,) if isinstance(field, str) else tuple(field)
    text = json.dumps(result)
    assert result.get('failed'), ('bad input was accepted', args, result)
    assert 'Traceback' not in text and 'unexpected error' not in result.get('msg', ''), ('not a clean failure', args, result)
    assert any(f in result['msg'] for f in fields), ('the message does not name %s' % ' or '.join(fields), args, result['msg'])
    assert not result.get('changed'), ('a refused input reported a change', args, result)


class Tally:
    """Cases run per fuzzer; records one figure per fuzzer (``survived`` false when a case failed)."""

    def __init__(self):
        self.counts = {}
        self.failed = set()

    @contextlib.contextmanager
    def case(self, scenario):
        """Count one case of ``scenario``; remember it failed if the block raises."""
        self.counts[scenario] = self.counts.get(scenario, 0) + 1
        try:
            yield
        except BaseException:
            self.failed.add(scenario)
            raise

    def record(self, world_changed=False):
        """Write the figures (call once, when the fuzzers of a test module are done)."""
        for scenario, count in sorted(self.counts.items()):
            figures.record('fuzz', scenario, survived=scenario not in self.failed and not world_changed, count=count,
                           detail='world changed' if world_changed else '')
        # the next target of the same module starts from zero (no scenario is recorded twice)
        self.counts = {}
        self.failed = set()


def libvirt_world(conn):
    """Everything a module could change on a libvirt host: domains, pools and volumes, networks, secrets (drain marks)."""
    import libvirt  # pylint: disable=import-outside-toplevel
    state = {'domains': sorted((d.name(), d.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), d.isActive()) for d in conn.listAllDomains(0))}
    pools = []
    for pool in conn.listAllStoragePools(0):
        vols = sorted((v.name(), v.XMLDesc(0)) for v in pool.listAllVolumes(0)) if pool.isActive() else []
        pools.append((pool.name(), pool.XMLDesc(libvirt.VIR_STORAGE_XML_INACTIVE), pool.isActive(), vols))
    state['pools'] = sorted(pools)
    state['networks'] = sorted((n.name(), n.XMLDesc(0)) for n in conn.listAllNetworks(0))
    state['secrets'] = sorted(s.XMLDesc(0) for s in conn.listAllSecrets(0))
    return state


def world_diff(before, after):
    """A short description of what differs between two libvirt_world() snapshots."""
    out = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            out.append('%s: %r -> %r' % (key, before.get(key), after.get(key)))
    return '; '.join(out)[:3000]


def kube_world(srv):
    """Every object of the API test server as bytes, and its resourceVersion counter (any write bumps it); on the real
    stack the number of requests sent so far through the fault proxy and the test namespaces' objects."""
    if getattr(srv, 'real', False):
        return srv.world()
    with srv.store.lock:
        objects = dict(('%s/%s' % key, dict(('%s/%s' % k, o) for k, o in bucket.items())) for key, bucket in srv.store.objects.items())
        return srv.store.rv, json.dumps(objects, sort_keys=True, default=str).encode()


def kube_write_mark(srv):
    """A mark that moves with every write to the API server (the emulator's resourceVersion; on the real stack the
    number of write requests sent through the fault proxy)."""
    return srv.world()[0] if getattr(srv, 'real', False) else srv.store.rv


def kube_writes_since(srv, rv):
    """The writes the API server committed after resourceVersion ``rv`` (for failure messages); on the real stack the
    write requests sent after ``rv`` requests."""
    if getattr(srv, 'real', False):
        return srv.writes_since(rv)
    with srv.store.lock:
        return ['%s %s %s/%s' % (ev.type, '/'.join(ev.key), ev.obj['metadata'].get('namespace', ''), ev.obj['metadata'].get('name'))
                for ev in srv.store.events if ev.rv > rv][:20]
