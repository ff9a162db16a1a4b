"""The checker of a chaos campaign: proves a history legal, or names the first violations with the history around them.

A history (a dict, as :mod:`tests.chaos.campaign` writes it to ``history.json``):

* ``seed``;
* ``journal``: the audit journal's records (``$CONVERGE_VIRT_AUDIT_JOURNAL``: begin/end, kind, object, task_id, pid,
  monotonic time);
* ``kills``: ``{'time', 'pids'}`` for each process tree the nemesis SIGKILLed (a task begun by one of those pids and
  never ended is taken as ended at the kill);
* ``declarations``: ``{'id', 'worker', 'object', 'fields': {field: value}, 'start', 'end', 'outcome'}`` with outcome
  ``ok`` (acknowledged: the playbook returned 0), ``failed`` or ``killed``;
* ``writes``: ``{'volume', 'digest', 'time'}``: the declared writes into volumes;
* ``final``: the world once the campaign stopped (``values``: ``[{'object', 'field', 'value'}]`` before the final
  converge; ``checksums``: volume -> digest; ``domains``: host -> names; ``jobs``; ``tasks``; ``volumes``: host ->
  names; ``expected_domains``: name -> [hosts it may be on]; ``expected_volumes``: host -> names;
  ``reconcile_after_fix``: what reconcile still found after a reconcile with fix; ``second_converge_changed``: the
  tasks the second final converge changed).

Rules (each violation names its kind):

* ``overlap``: two acting intervals (kind ``vm``: they hold the VM's task) on one VM overlap, except a ``delete`` that
  begins inside another task's interval: the phase model lets delete preempt any task (docs/states.md, Nova's
  delete), and the preempted task must then not report success (its interval ends ``failed`` or killed; ``done``
  is an overlap); such preemptions are counted (:func:`preemptions`);
* ``unended``: an interval begun by a process that was not killed never ended;
* ``lost-declaration``: an acknowledged declaration's field does not hold at the end although no other declaration
  that may change that object (its own, or one naming it in ``touches``) overlapped or followed it (a ``capacity``
  holds when the volume is at least that large);
* ``checksum``: a volume's content differs from its last declared write;
* ``orphan-domain`` / ``half-migrated`` / ``orphan-volume`` / ``job-left`` / ``task-left``: the final world holds
  what no declaration explains;
* ``final-converge-failed`` / ``reconcile-finds`` / ``not-idempotent``: the final converge (with a reconcile with fix)
  failed, or after it reconcile still finds something, or a second converge changed something.
"""

import json

AT_LEAST_FIELDS = ('capacity',)


class Violation(dict):
    """One broken rule: kind, object, message and the history entries around it."""

    def __init__(self, kind, obj, message, around=()):
        super().__init__(kind=kind, object=obj, message=message, around=list(around))


def _object_of(entry):
    return entry.get(entry.get('kind', 'vm')) or entry.get('vm')


def intervals(history):
    """(intervals, violations): [{'kind', 'object', 'task_id', 'action', 'begin', 'end', 'outcome', 'pid'}] from the journal."""
    kills = sorted(history.get('kills', ()), key=lambda kill: kill['time'])
    killed_at = {}
    for kill in kills:
        for pid in kill['pids']:
            killed_at.setdefault(pid, kill['time'])
    open_, out, violations = {}, [], []
    for entry in sorted(history.get('journal', ()), key=lambda e: e['monotonic']):
        key = (entry.get('kind', 'vm'), _object_of(entry), entry['task_id'], entry['action'])
        if entry['event'] == 'begin':
            open_[key] = entry
            continue
        start = open_.pop(key, None)
        if start is None:
            violations.append(Violation('unended', key[1], 'an end record of task %s (%s) without its begin' % (key[2], key[3]), [entry]))
            continue
        out.append({'kind': key[0], 'object': key[1], 'task_id': key[2], 'action': key[3], 'begin': start['monotonic'],
                    'end': entry['monotonic'], 'outcome': entry.get('outcome'), 'pid': start['pid']})
    for key, start in open_.items():
        if start['pid'] in killed_at and killed_at[start['pid']] >= start['monotonic']:
            out.append({'kind': key[0], 'object': key[1], 'task_id': key[2], 'action': key[3], 'begin': start['monotonic'],
                        'end': killed_at[start['pid']], 'outcome': 'killed', 'pid': start['pid']})
        else:
            violations.append(Violation('unended', key[1], 'task %s (%s) of pid %s began and never ended, and its process was not killed'
                                        % (key[2], key[3], start['pid']), [start]))
    out.sort(key=lambda span: (span['kind'], span['object'], span['begin']))
    return out, violations


def _preempts(earlier, later):
    """Whether ``later`` legally preempted ``earlier``: a delete that began inside it, after which ``earlier`` did not succeed."""
    return later['action'] == 'delete' and earlier.get('outcome') != 'done'


def _overlapping(spans):
    """Each (earlier, later) pair of intervals of one VM in which ``later`` begins before ``earlier`` ended."""
    last = {}
    for span in spans:
        if span['kind'] != 'vm':
            continue
        previous = last.get(span['object'])
        if previous is not None and span['begin'] < previous['end']:
            yield previous, span
        if previous is None or span['end'] > previous['end']:
            last[span['object']] = span


def check_overlaps(spans):
    """Violations: two intervals of one VM that overlap (volume create/grow/delete hold no task: they may overlap), unless a
    delete preempted the other (see the module's rules)."""
    return [Violation('overlap', span['object'], 'tasks %s (%s) and %s (%s) acted on %s %s at once (%.3f < %.3f)'
                      % (previous['task_id'], previous['action'], span['task_id'], span['action'], span['kind'], span['object'],
                         span['begin'], previous['end']), [previous, span])
            for previous, span in _overlapping(spans) if not _preempts(previous, span)]


def preemptions(spans):
    """The (preempted, delete) pairs of intervals: a delete that began inside another task's interval on the same VM."""
    return [(previous, span) for previous, span in _overlapping(spans) if _preempts(previous, span)]


def _holds(field, declared, actual):
    if field in AT_LEAST_FIELDS:
        return actual is not None and declared is not None and actual >= declared
    return actual == declared


def touches(decl, obj):
    """Whether ``decl`` may change ``obj`` (its object, or one it names in ``touches``: a VM deleted takes its attachments)."""
    return decl['object'] == obj or obj in decl.get('touches', ())


def check_declarations(history):
    """Violations: an acknowledged declaration whose field does not hold although nothing overlapped or followed it."""
    finals = dict(((v['object'], v['field']), v['value']) for v in history.get('final', {}).get('values', ()))
    decls = history.get('declarations', ())
    violations = []
    for decl in decls:
        if decl['outcome'] != 'ok':
            continue
        for field, value in sorted(decl['fields'].items()):
            if (decl['object'], field) not in finals:
                continue
            actual = finals[(decl['object'], field)]
            if _holds(field, value, actual):
                continue
            later = [other for other in decls if other is not decl and touches(other, decl['object'])
                     and (other['end'] is None or other['end'] > decl['start'])]
            if later:
                continue
            violations.append(Violation('lost-declaration', decl['object'], 'declaration %s (worker %s) set %s=%r, acknowledged at %.3f; '
                                        'nothing overlapped or followed it, yet %s is %r at the end'
                                        % (decl['id'], decl['worker'], field, value, decl['end'], field, actual),
                                        [d for d in decls if d['object'] == decl['object']][-8:]))
    return violations


def check_checksums(history):
    """Violations: a volume whose content is not its last declared write."""
    last = {}
    for write in sorted(history.get('writes', ()), key=lambda w: w['time']):
        last[write['volume']] = write
    violations = []
    for volume, digest in sorted(history.get('final', {}).get('checksums', {}).items()):
        if volume in last and last[volume]['digest'] != digest:
            violations.append(Violation('checksum', volume, 'volume %s holds %s, its last declared write was %s'
                                        % (volume, digest[:16], last[volume]['digest'][:16]), [last[volume]]))
    return violations


def check_world(history):
    """Violations of the final world: orphans, half-migrated copies, jobs and tasks left, reconcile and idempotence."""
    final = history.get('final', {})
    violations = []
    expected = final.get('expected_domains', {})
    where = {}
    for host, names in sorted(final.get('domains', {}).items()):
        for name in names:
            where.setdefault(name, []).append(host)
            if name not in expected or host not in expected[name]:
                violations.append(Violation('orphan-domain', name, 'domain %s on %s: no declaration puts it there' % (name, host)))
    for name, hosts in sorted(where.items()):
        if len(hosts) > 1:
            violations.append(Violation('half-migrated', name, 'domain %s is defined on %s at once' % (name, ', '.join(hosts))))
    wanted_volumes = final.get('expected_volumes', {})
    for host, names in sorted(final.get('volumes', {}).items()):
        for name in names:
            if name not in wanted_volumes.get(host, ()):
                violations.append(Violation('orphan-volume', name, 'volume %s on %s: no declaration made it' % (name, host)))
    for job in final.get('jobs', ()):
        violations.append(Violation('job-left', job.get('name'), 'a libvirt job is still active: %s' % json.dumps(job, sort_keys=True)))
    for task in final.get('tasks', ()):
        violations.append(Violation('task-left', task.get('name'), 'a task is still recorded after the final converge: %s'
                                    % json.dumps(task, sort_keys=True)))
    converge = final.get('final_converge') or {}
    if converge.get('rc', 0) != 0:
        violations.append(Violation('final-converge-failed', None, 'the final converge (and reconcile with fix) failed: %s' % converge.get('failures')))
    for finding in final.get('reconcile_after_fix', ()):
        violations.append(Violation('reconcile-finds', finding.get('name'), 'reconcile still finds %s after a reconcile with fix'
                                    % json.dumps(finding, sort_keys=True)))
    for task in final.get('second_converge_changed', ()):
        violations.append(Violation('not-idempotent', task, 'the second final converge changed %s' % task))
    return violations


def check(history):
    """Every violation of ``history`` (an empty list when it is legal)."""
    spans, violations = intervals(history)
    violations.extend(check_overlaps(spans))
    violations.extend(check_declarations(history))
    violations.extend(check_checksums(history))
    violations.extend(check_world(history))
    return violations


def report(history, violations, limit=5):
    """The text a failed campaign prints: the seed, then each violation with the minimal history around it."""
    lines = ['chaos campaign seed %s: %d violation(s); rerun with SEED=%s' % (history.get('seed'), len(violations), history.get('seed'))]
    for violation in violations[:limit]:
        lines.append('- %s on %s: %s' % (violation['kind'], violation['object'], violation['message']))
        for entry in violation['around']:
            lines.append('    %s' % json.dumps(entry, sort_keys=True))
    if len(violations) > limit:
        lines.append('... and %d more' % (len(violations) - limit))
    return '\n'.join(lines)
