#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: migration_info
short_description: Report in-flight and recent migrations of VMs on libvirt hosts or KubeVirt
version_added: 0.1.0
description:
  - For every VM of the given hosts that is migrating or migrated recently, reports the migration in flight
    (phase, target, progress read from the source's job) and the last few migrations with their phases and outcome.
  - The history is a short JSON list (the last five migrations) kept in a metadata element of the domain
    (namespace C(https://converge.virt/xmlns/migration/1)), written by M(converge.virt.migration). It travels
    with the domain to its new host, so every controller reads the same history.
  - With O(backend=kubevirt) it reads the C(VirtualMachineInstanceMigration) objects of O(namespace), which the cluster keeps,
    and reports per VM the one in flight and the last five final ones, with KubeVirt's phases, our failure reason and outcome
    (C(succeeded), C(failed), C(aborted)), source and target nodes, and the timestamps of the instance's C(migrationState).
  - "libvirt only: O(uri), O(uris), O(username), O(password). kubevirt only: O(kubeconfig), O(context), O(host), O(api_key),
    O(ca_cert), O(validate_certs), O(namespace)."
extends_documentation_fragment:
  - converge.virt.backend
  - converge.virt.backend.read
options:
  uris:
    description: Several hosts to read (instead of, or besides, O(uri)). Credentials of O(username) and O(password) apply to all.
    type: list
    elements: str
  name:
    description: Only these VMs (all VMs with a migration when not given).
    type: list
    elements: str
seealso:
  - module: converge.virt.migration
  - module: converge.virt.host
    description: Sets or removes the drain mark of a host, which its migrations are usually for.
'''

EXAMPLES = r'''
- name: Progress of the migrations of two hosts
  converge.virt.migration_info:
    uris:
      - qemu+ssh://root@hv1/system
      - qemu+ssh://root@hv2/system
  register: migs

- name: Wait until db-1 is no longer migrating
  converge.virt.migration_info:
    uri: qemu+ssh://root@hv1/system
    name: [db-1]
  register: db
  until: db.migrations | selectattr('in_flight') | list | length == 0
  retries: 60
  delay: 5

- name: Migrations of the VMs of a KubeVirt namespace
  converge.virt.migration_info:
    backend: kubevirt
    namespace: prod
  register: kube_migs
'''

RETURN = r'''
migrations:
  description:
    - One entry per VM and host with a migration in flight or in its history. C(in_flight) (null when none) has
      C(id), C(phase), C(target), C(started_at), C(owner), C(owner_gone) and C(progress) (C(data_total),
      C(data_processed), C(data_remaining), C(memory_dirty_rate), C(memory_iteration), C(downtime), ...);
      C(recent) lists the last migrations (C(id), C(source), C(target), C(mode), C(phase), C(phases),
      C(reason), C(started_at), C(finished_at), C(data_total), C(downtime)); C(last) is the newest of them.
    - On kubevirt an entry is a VM of O(namespace) (C(node), state words); C(in_flight) and C(recent) entries have C(id) (the
      migration object), C(phase) (KubeVirt's), C(phases), C(reason), C(outcome), C(message), C(source), C(target), C(mode),
      C(created_at), C(started_at), C(finished_at), C(task_id) and C(progress).
  returned: always
  type: list
  elements: dict
hosts:
  description: The hosts read (credentials removed), and the ones that could not be read with the error.
  returned: always
  type: list
  elements: dict
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache
from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.migration_run import run_migration_info
from ansible_collections.converge.virt.plugins.module_utils._providers.migration import LOADERS


def main():
    """Entry point."""
    spec = _providers.argument_spec(uris=dict(type='list', elements='str'), name=dict(type='list', elements='str'))
    _providers.run('migration_info', ConvergeModule(argument_spec=spec, supports_check_mode=True), LOADERS, run_migration_info)


if __name__ == '__main__':
    main()
