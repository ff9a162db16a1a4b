"""Run make targets in parallel lanes (`make test`): each lane runs its targets one after the other.

The integration tier keeps two pytest workers mostly waiting (on guests, daemons and ansible
processes), and so do the molecule scenarios: run side by side they take the wall time of the
longer lane instead of the sum. Every lane's tiers start their own private network namespace
(tools/virtlab/netns.py) and their own addresses, so they cannot meet.

    python -m tools.lanes [--make make] [--log-dir build/lanes] "integration-run" "molecule-run matrix-run"

The first lane's output is streamed; every other lane's goes to ``<log-dir>/lane-N.log`` and is
printed whole when that lane ends. A failed target ends its lane (the lane's later targets are
skipped); the other lanes go on. At the end a table gives each target's wall time and result; the
exit status is 1 when any target failed or was skipped.
"""

import argparse
import os
import subprocess
import sys
import threading
import time


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--make', default='make')
    parser.add_argument('--log-dir', default=os.path.join('build', 'lanes'))
    parser.add_argument('lanes', nargs='+', help='one argument per lane: its make targets, separated by spaces')
    args = parser.parse_args(argv)
    lanes = [lane.split() for lane in args.lanes]
    if not all(lanes):
        parser.error('a lane has no target')
    os.makedirs(args.log_dir, exist_ok=True)
    results = []
    logs = {}
    threads = []
    print_lock = threading.Lock()

    def lane_thread(index, targets):
        if index == 0:
            run_lane(args.make, targets, None, results, index)
            return
        path = os.path.join(args.log_dir, 'lane-%d.log' % index)
        logs[index] = path
        with open(path, 'w+', encoding='utf-8') as log:
            run_lane(args.make, targets, log, results, index)
            log.seek(0)
            with print_lock:
                sys.stdout.flush()
                sys.stdout.write('\n===== lane %d (%s), from %s =====\n' % (index, ' '.join(targets), path))
                sys.stdout.write(log.read())
                sys.stdout.write('===== end of lane %d =====\n' % index)
                sys.stdout.flush()

    started = time.monotonic()
    for index, targets in enumerate(lanes):
        thread = threading.Thread(target=lane_thread, args=(index, targets), name='lane-%d' % index)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    order = dict(((lane, target), position) for lane, targets in enumerate(lanes) for position, target in enumerate(targets))
    print('\nlanes: %.0f s in all' % (time.monotonic() - started))
    for lane, target, seconds, result in sorted(results, key=lambda row: (row[0], order[(row[0], row[1])])):
        print('  lane %d  %-16s %7.0f s  %s' % (lane, target, seconds, result))
    return 0 if all(row[3] == 'passed' for row in results) else 1


if __name__ == '__main__':
    sys.exit(main())
