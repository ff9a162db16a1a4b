"""The chaos checker can fail: forged histories, each with one kind of violation, and a legal one it accepts."""

import copy

import pytest

from tests.chaos import checker


def begin(obj, task, at, pid=100, action='start', kind='vm'):
    return {'event': 'begin', 'kind': kind, kind: obj, 'task_id': task, 'action': action, 'pid': pid, 'monotonic': at}


def end(obj, task, at, pid=100, action='start', kind='vm', outcome='done'):
    return {'event': 'end', 'kind': kind, kind: obj, 'task_id': task, 'action': action, 'pid': pid, 'monotonic': at, 'outcome': outcome}


def decl(ident, obj, fields, start, finish, outcome='ok', worker=0):
    return {'id': ident, 'worker': worker, 'object': obj, 'fields': fields, 'start': start, 'end': finish, 'outcome': outcome}


LEGAL = {
    'seed': 7,
    'journal': [begin('vm-a', 't1', 1.0), end('vm-a', 't1', 2.0),
                begin('vm-a', 't2', 2.5, pid=101, action='stop'),  # killed at 3.0: ends there
                begin('vm-a', 't3', 3.5, pid=102, action='start'), end('vm-a', 't3', 4.0, pid=102, action='start'),
                begin('vol-x', 'v1', 1.5, kind='volume', action='grow_volume'), end('vol-x', 'v1', 1.7, kind='volume', action='grow_volume')],
    'kills': [{'time': 3.0, 'pids': [101]}],
    'declarations': [decl('d1', 'vm-a', {'power': 'running'}, 0.5, 2.2), decl('d2', 'vm-a', {'power': 'stopped'}, 2.3, 3.0, outcome='killed'),
                     decl('d3', 'vm-a', {'power': 'running'}, 3.2, 4.2), decl('d4', 'vol-x', {'capacity': 8}, 1.0, 1.8)],
    'writes': [{'volume': 'keep', 'digest': 'aa' * 32, 'time': 0.1}],
    'final': {'values': [{'object': 'vm-a', 'field': 'power', 'value': 'running'}, {'object': 'vol-x', 'field': 'capacity', 'value': 12}],
              'checksums': {'keep': 'aa' * 32}, 'domains': {'h0': ['vm-a'], 'h1': []}, 'expected_domains': {'vm-a': ['h0', 'h1']},
              'volumes': {'h0': ['keep', 'vol-x']}, 'expected_volumes': {'h0': ['keep', 'vol-x']}, 'jobs': [], 'tasks': [],
              'reconcile_after_fix': [], 'second_converge_changed': [], 'final_converge': {'rc': 0, 'failures': '[]'}},
}


def kinds(history):
    return sorted(set(v['kind'] for v in checker.check(history)))


def test_a_legal_history_passes():
    assert checker.check(LEGAL) == []


def forged(change):
    history = copy.deepcopy(LEGAL)
    change(history)
    return history


def _overlap(h):
    h['journal'].append(begin('vm-a', 't9', 1.5, pid=109, action='pause'))
    h['journal'].append(end('vm-a', 't9', 1.8, pid=109, action='pause'))


def _killed_task_overlaps(h):
    h['kills'][0]['time'] = 3.8  # the killed stop's interval now reaches into t3's


def _unended(h):
    h['kills'] = []


def _end_without_begin(h):
    h['journal'].append(end('vm-a', 'ghost', 5.0))


def _lost(h):
    h['final']['values'][0]['value'] = 'stopped'


def _lost_capacity(h):
    h['final']['values'][1]['value'] = 4


def _checksum(h):
    h['final']['checksums']['keep'] = 'bb' * 32


def _orphan_domain(h):
    h['final']['domains']['h1'] = ['vm-zombie']


def _half_migrated(h):
    h['final']['domains']['h1'] = ['vm-a']


def _orphan_volume(h):
    h['final']['volumes']['h0'].append('vol-x.partial')


def _job(h):
    h['final']['jobs'] = [{'host': 'h0', 'name': 'vm-a', 'type': 2}]


def _task(h):
    h['final']['tasks'] = [{'host': 'h0', 'name': 'vm-a', 'task_state': 'POWERING_ON'}]


def _reconcile(h):
    h['final']['reconcile_after_fix'] = [{'name': 'vm-a', 'kind': 'power'}]


def _final_failed(h):
    h['final']['final_converge'] = {'rc': 2, 'failures': "[('c0a running', 'boom')]"}


def _idempotent(h):
    h['final']['second_converge_changed'] = ['vm-a power']


@pytest.mark.parametrize('change, kind', [
    (_overlap, 'overlap'), (_killed_task_overlaps, 'overlap'), (_unended, 'unended'), (_end_without_begin, 'unended'),
    (_lost, 'lost-declaration'), (_lost_capacity, 'lost-declaration'), (_checksum, 'checksum'), (_orphan_domain, 'orphan-domain'),
    (_half_migrated, 'half-migrated'), (_orphan_volume, 'orphan-volume'), (_job, 'job-left'), (_task, 'task-left'),
    (_reconcile, 'reconcile-finds'), (_idempotent, 'not-idempotent'), (_final_failed, 'final-converge-failed')])
def test_each_kind_of_violation_is_found(change, kind):
    history = forged(change)
    assert kinds(history) == [kind]
    text = checker.report(history, checker.check(history))
    assert 'seed 7' in text and 'SEED=7' in text and kind in text


def test_a_declaration_overlapped_by_another_may_lose():
    def change(h):
        h['final']['values'][0]['value'] = 'paused'
        h['declarations'].append(decl('d5', 'vm-a', {'power': 'paused'}, 4.0, 4.5, outcome='failed', worker=1))
    assert checker.check(forged(change)) == []


def test_the_report_shows_the_history_around_a_lost_declaration():
    history = forged(_lost)
    text = checker.report(history, checker.check(history))
    assert '"id": "d3"' in text and 'power=\'running\'' in text
