"""The bounded KubeVirt chaos campaign of ``make test``: a fixed seed, the real API stack (tools/kubelab: etcd,
kube-apiserver, virt-api; KubeVirt's controllers emulated), three workers, 30 s of faults.

Workers run real ``ansible-playbook`` processes with random declarations (power states, delete and re-create, a claim
hot-plugged and unplugged, a claim created, grown and deleted, a snapshot created, deleted and restored, migrations)
while a nemesis SIGKILLs whole process trees and restarts (or SIGKILLs) kube-apiserver, etcd and virt-api; the runs in
flight at the end are SIGKILLed; then the final converge, reconcile with fix, reconcile and second converge. The
checker must find nothing; a violation prints the seed and the history around it (rerun it with
``python -m tests.chaos.campaign_kubevirt --seed <seed> --minutes <minutes>`` inside ``tools.virtlab netns``).
``CHAOS_KUBEVIRT_SEED`` / ``CHAOS_KUBEVIRT_SECONDS`` change the bounded campaign.
"""

import os

import pytest

from tests.chaos import campaign_kubevirt, checker
from tests.kubeapi.fixtures import MODE

pytestmark = pytest.mark.skipif(MODE == 'emulated', reason='faults of the real stack: CONVERGE_VIRT_KUBE_API=emulated has no stack')

SEED = int(os.environ.get('CHAOS_KUBEVIRT_SEED', '20261126'))
SECONDS = float(os.environ.get('CHAOS_KUBEVIRT_SECONDS', '40'))


def test_bounded_kubevirt_chaos_campaign_is_legal(tmp_path):
    history, violations, numbers = campaign_kubevirt.run_campaign(str(tmp_path), SEED, SECONDS, workers=3, nemesis_every=(4.0, 9.0))
    assert not violations, checker.report(history, violations)
    # the campaign did what it is for: declarations acknowledged, runs killed, components restarted, tasks journaled
    # (a module run takes 20-30 s at load average 40: few declarations then, but at least one must be acknowledged)
    failures = [(d['id'], d['fields'], d.get('error')) for d in history['declarations'] if d['outcome'] == 'failed']
    assert len(history['declarations']) >= 3 and numbers['outcomes'].get('ok', 0) >= 1, (numbers, failures)
    assert any(f['fault'] != 'kill' for f in history['faults']), numbers
    # VM tasks journaled: at least half as many task intervals as acknowledged declarations that changed a VM's power or
    # node (an acknowledged declaration already held, or one of a volume or snapshot, takes no VM task: the CI run of
    # 2026-11-29 had 4 acknowledged declarations and 1 journaled task at load 12-17, so counting every 'ok' failed)
    vm_changes = [d['id'] for d in history['declarations'] if d['outcome'] == 'ok' and d.get('changed') and
                  ('power' in d['fields'] or 'node' in d['fields'])]
    assert numbers['journal_intervals'] >= len(vm_changes) // 2, (numbers, vm_changes)
    assert history['final']['final_converge']['rc'] == 0, history['final']['final_converge']
