# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one fleet runner of migrations (_common.migrate.migrate_each) and the one failure summary (_common.fleet)."""

import re
import threading
import time

from ansible_collections.converge.virt.plugins.module_utils._common import migrate
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.fleet import fleet_failure


def test_each_key_runs_in_order_and_a_failure_stops_no_other():
    running, peak, lock = [0], [0], threading.Lock()

    def converge(key):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)   # long enough for the second worker to start: the peak shows the cap is reached, never passed
        try:
            if key == 'bad':
                raise InvalidDeclaration('name', 'VM %r does not exist' % key)
            if key == 'boom':
                raise RuntimeError('socket closed')
            return {'name': key, 'changed': True, 'failed': False}
        finally:
            with lock:
                running[0] -= 1

    def failed(key, fields):
        return dict(fields, name=key, changed=False, failed=True)

    results = migrate.migrate_each(['a', 'bad', 'b', 'boom', 'c'], converge, failed, parallel=2)
    assert [r['name'] for r in results] == ['a', 'bad', 'b', 'boom', 'c']
    assert [r['failed'] for r in results] == [False, True, False, True, False]
    assert results[1]['msg'] == "name: VM 'bad' does not exist" and results[1]['field'] == 'name'
    assert re.fullmatch(r'unexpected error \(RuntimeError at module_utils/_common/migrate\.py:\d+ in one\): socket closed', results[3]['msg'])
    assert peak[0] == 2
    assert fleet_failure(results) == '2 of 5 VMs failed: bad, boom'
    assert fleet_failure(results, label=lambda r: 'ns/' + r['name']) == '2 of 5 VMs failed: ns/bad, ns/boom'
    assert fleet_failure(results[:1]) is None
