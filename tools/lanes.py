"""Run make targets in parallel lanes (`make test`): each lane runs its targets one after the other.

The integration tier keeps two pytest workers mostly waiting (on guests, daemons and ansible
processes), and so do the molecule scenarios: run side by side they take the wall time of the
longer lane instead of the sum. Every lane's tiers start their own private network namespace
(tools/virtlab/netns.py) and their own addresses, so they cannot meet.

    python -m tools.lanes [--make make] [--log-dir build/lanes] "integration-run" "molecule-run matrix-run"

The first lane's output is streamed; every other lane's goes to ``<log-dir>/lane-N.log`` and is
printed whole when that lane ends. A failed target ends its lane (the lane's later targets are
skipped); the other lanes go on. ``--first "units sanity"`` runs targets one after the other before
the lanes start (a failure there skips everything after it). At the end a summary gives each
target's wall time and result, each lane's total and the slowest test files (read from the JUnit
XML files that the pytest tiers write, ``--junit GLOB``, counting only files written during this
run); it is printed and written to ``<log-dir>/summary.txt``. The exit status is 1 when any target
failed or was skipped.
"""

import argparse
import collections
import glob
import os
import subprocess
import sys
import threading
import time
from xml.etree import ElementTree  # nosec B405 - reads only the JUnit files this run's pytest tiers wrote


def run_lane(make, targets, output, results, index):
    """Run ``targets`` in order with ``make``; record (lane, target, seconds, result) in ``results``."""
    failed = False
    for target in targets:
        if failed:
            results.append((index, target, 0.0, 'skipped'))
            continue
        started = time.monotonic()
        rc = subprocess.call([make, '--no-print-directory', target], stdout=output, stderr=subprocess.STDOUT)
        results.append((index, target, time.monotonic() - started, 'passed' if rc == 0 else 'failed (rc %d)' % rc))
        failed = rc != 0


def _module_path(classname):
    """tests/a/test_b.py from a JUnit classname 'tests.a.test_b' or 'tests.a.test_b.TestClass'."""
    parts = classname.split('.')
    while len(parts) > 1 and parts[-1][:1].isupper():
        parts.pop()
    return '/'.join(parts) + '.py'


def slowest_files(patterns, since, limit=10):
    """[(seconds, file, tests, source)] of the ``limit`` test files with the most test time in the JUnit XML files matching
    ``patterns`` written at or after ``since`` (time.time()); a file's seconds are the sum of its test cases' times (set-up,
    call and tear-down), i.e. how long it kept one pytest worker busy."""
    per_file = collections.defaultdict(lambda: [0.0, 0])
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                if os.path.getmtime(path) < since:
                    continue
                root = ElementTree.parse(path).getroot()  # nosec B314 - our own pytest's output
            except (OSError, ElementTree.ParseError):
                continue
            source = os.path.relpath(path)
            for case in root.iter('testcase'):
                name = case.get('file') or _module_path(case.get('classname') or '')
                entry = per_file[(name, source)]
                entry[0] += float(case.get('time') or 0)
                entry[1] += 1
    rows = sorted(((seconds, name, count, source) for (name, source), (seconds, count) in per_file.items()), reverse=True)
    return rows[:limit]


def summary(stages, results, wall, junit_rows):
    """The run's timing summary, as lines; ``stages`` is [(name, [(label, targets)], wall seconds or None)]."""
    lines = ['lanes: %.0f s in all (wall, from the first target to the end of the last lane)' % wall]
    by_label = collections.defaultdict(list)
    for label, target, seconds, result in results:
        by_label[label].append((target, seconds, result))
    for name, lanes, stage_wall in stages:
        for label, _targets in lanes:
            # each lane's rows were appended in the order its targets ran
            for target, seconds, result in by_label[label]:
                lines.append('  %-13s %-22s %7.0f s  %s' % (label, target, seconds, result))
        if name != 'lanes' and stage_wall is not None:
            lines.append('  wall of %s: %.0f s (%s)' % (name, stage_wall, ' | '.join(' '.join(targets) for _label, targets in lanes)))
    for name, lanes, _wall in stages:
        if name == 'lanes':
            for label, targets in lanes:
                lines.append('  total of %s: %.0f s (%s)' % (label, sum(row[1] for row in by_label[label]), ' '.join(targets)))
    if junit_rows:
        lines.append('slowest test files (test time summed over their tests: set-up, call, tear-down):')
        for seconds, name, count, source in junit_rows:
            lines.append('  %7.0f s  %-60s %4d tests  (%s)' % (seconds, name, count, source))
    return lines


def run_stage(make, lanes, log_dir, results, print_lock):
    """Run ``lanes`` ([(label, targets, log name)]) side by side: the first lane's output is streamed, every other lane's
    goes to its log file in ``log_dir`` and is printed whole when the lane ends. Return the stage's wall seconds."""
    def lane_thread(position, label, targets, log_name):
        if position == 0:
            run_lane(make, targets, None, results, label)
            return
        path = os.path.join(log_dir, log_name)
        with open(path, 'w+', encoding='utf-8') as log:
            run_lane(make, targets, log, results, label)
            log.seek(0)
            with print_lock:
                sys.stdout.flush()
                sys.stdout.write('\n===== %s (%s), from %s =====\n' % (label, ' '.join(targets), path))
                sys.stdout.write(log.read())
                sys.stdout.write('===== end of %s =====\n' % label)
                sys.stdout.flush()

    started = time.monotonic()
    threads = []
    for position, (label, targets, log_name) in enumerate(lanes):
        thread = threading.Thread(target=lane_thread, args=(position, label, targets, log_name), name=label)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return time.monotonic() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--make', default='make')
    parser.add_argument('--log-dir', default=os.path.join('build', 'lanes'))
    parser.add_argument('--first', action='append', default=[],
                        help='a stage run before the lanes (repeatable, in order): its make targets separated by spaces, run one '
                             'after the other; " | " separates lanes of the stage that run side by side')
    parser.add_argument('--junit', action='append', default=[], help='a glob of JUnit XML files the tiers write (repeatable)')
    parser.add_argument('lanes', nargs='+', help='one argument per lane: its make targets, separated by spaces')
    args = parser.parse_args(argv)
    lanes = [lane.split() for lane in args.lanes]
    firsts = [[lane.split() for lane in stage.split('|')] for stage in args.first]
    if not all(lanes) or not all(all(stage) for stage in firsts):
        parser.error('a lane has no target')
    os.makedirs(args.log_dir, exist_ok=True)
    # [(stage name, [(label, targets, log file name)])]
    plan = []
    for number, stage in enumerate(firsts, 1):
        name = 'first' if len(firsts) == 1 else 'first stage %d' % number
        plan.append((name, [(name if len(stage) == 1 else '%s.%d' % (name.replace(' stage ', ' '), index), targets,
                             '%s-lane-%d.log' % (name.replace(' ', '-'), index)) for index, targets in enumerate(stage)]))
    plan.append(('lanes', [('lane %d' % index, targets, 'lane-%d.log' % index) for index, targets in enumerate(lanes)]))
    results = []
    print_lock = threading.Lock()
    stages = []
    started, started_at = time.monotonic(), time.time()
    failed = False
    for name, stage_lanes in plan:
        if failed:
            results.extend((label, target, 0.0, 'skipped') for label, targets, _log in stage_lanes for target in targets)
            stages.append((name, [(label, targets) for label, targets, _log in stage_lanes], None))
            continue
        wall = run_stage(args.make, stage_lanes, args.log_dir, results, print_lock)
        stages.append((name, [(label, targets) for label, targets, _log in stage_lanes], wall))
        failed = any(row[3] != 'passed' for row in results)
    lines = summary(stages, results, time.monotonic() - started, slowest_files(args.junit, started_at))
    text = '\n'.join(lines) + '\n'
    with open(os.path.join(args.log_dir, 'summary.txt'), 'w', encoding='utf-8') as stream:
        stream.write(text)
    sys.stdout.write('\n' + text)
    sys.stdout.flush()
    return 0 if all(row[3] == 'passed' for row in results) else 1


if __name__ == '__main__':
    sys.exit(main())
