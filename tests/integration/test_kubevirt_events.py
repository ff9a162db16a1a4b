"""The kubevirt_events event source (Event-Driven Ansible) against the Kubernetes API test server.

The source runs in its own process as ansible-rulebook would run it (the file's ``__main__`` prints every event
as a JSON line) while the collection's vm module changes VMs; the server's watch history is compacted and its
watches dropped (a 410 Gone for the old resourceVersion), and the source must list again and say so.
"""

# pylint: disable=redefined-outer-name,unused-import

import functools

from tests.integration.ansible_run import kubevirt_args, ok, run_module
from tests.integration.event_sources import EventSource
from tests.kubeapi.fixtures import kube_server  # noqa: F401  (pytest fixture)

NS = 'default'

kv = functools.partial(kubevirt_args, {'namespace': NS, 'wait_timeout': 60})


def small(srv, name, **args):
    return kv(srv, **dict(dict(name=name, vcpus=1, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}]), **args))


def change_of(name, **words):
    return lambda e: e['type'] == 'change' and e['vm']['name'] == name and all(e['vm'].get(k) == v for k, v in words.items())


def test_changes_carry_the_words_and_a_lost_history_is_listed_again(kube_server):
    srv = kube_server
    ok(run_module('vm', small(srv, 'ev-old', state='present')))
    events = EventSource('kubevirt_events', [NS, srv.kubeconfig_path], env={'KUBEVIRT_EVENTS_HEARTBEAT': '0.5'})
    try:
        old = events.next(lambda e: e['type'] == 'sync')
        assert (old['vm']['name'], old['vm']['vm_state'], old['vm']['status'], old['namespace']) == ('ev-old', 'STOPPED', 'Stopped', NS), old
        assert events.next(lambda e: e['type'] == 'sync_done')['count'] == 1

        # a start through the collection: the task in flight is marked, then the words reach Running
        ok(run_module('vm', small(srv, 'ev-1', state='running')))
        running = events.next(change_of('ev-1', status='Running', vm_state='ACTIVE', task_state=None))
        assert running['task_in_progress'] is False and running['vm']['phase'] == 'Running', running
        assert any(change_of('ev-1')(e) and e['task_in_progress'] for e in events.seen), 'no event marked the start task in flight'
        # only changes of the words are sent: every change event of ev-1 differs from the one before it
        words = [e['vm'] for e in events.seen if change_of('ev-1')(e)]
        assert all(a != b for a, b in zip(words, words[1:])), words

        assert events.next(lambda e: e['type'] == 'heartbeat')['watching'] is True

        # the watches drop and come back late, after the server forgot its history (etcd compaction): the old
        # resourceVersion is answered 410 Gone, so the source lists again and syncs every VM
        if srv.real:
            # etcd compacts on the API server's own schedule (every 5 minutes): the fault proxy answers the late
            # watches with the 410 Gone (reason Expired) a compacted resourceVersion gets
            srv.faults.add_http(r'/(virtualmachines|virtualmachineinstances)\?.*watch=', status=410, method='GET', count=2, delay=1.5,
                                reason='Expired', message='too old resource version')
            srv.faults.drop_watches()
        else:
            srv.faults.add_http(r'/(virtualmachines|virtualmachineinstances)\?watch=1', status=None, method='GET', count=2, delay=1.5)
            srv.faults.drop_watches()
            srv.store.mutate(srv.store.rtype('', 'nodes'), '', 'node01', lambda node: node['metadata'].setdefault('labels', {}).update(touched='1'))
            srv.store.compact()
        resynced = events.next(lambda e: e['type'] == 'sync' and e['vm']['name'] == 'ev-1')
        assert resynced['vm']['status'] == 'Running'
        assert events.next(lambda e: e['type'] == 'sync_done')['count'] == 2

        ok(run_module('vm', small(srv, 'ev-1', state='absent')))
        gone = events.next(change_of('ev-1', exists=False))
        assert gone['vm']['vm_state'] == 'DELETED' and gone['action'] == 'DELETED', gone
    finally:
        events.stop()
