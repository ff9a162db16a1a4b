# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubevirt_events: an Event-Driven Ansible event source for KubeVirt VirtualMachines of one namespace.

It lists the namespace's VirtualMachines and VirtualMachineInstances and watches both from the list's
resourceVersion. Whenever a change alters a VM's state words - computed by the same phase logic as
converge.virt.vm_info (vm_state, power_state, task_state, status, printable_status, phase, phase_reason) - it
sends a ``change`` event with the new words; a change that leaves the words as they were (a VMI's heartbeat
condition, a label) sends nothing.

- ``sync`` for every VM, then ``sync_done``, after the first list - and again after a watch could not go on
  from its resourceVersion (410 Gone: the server compacted it) or the connection failed, since changes were
  missed in between (first a ``change`` with action ``DELETED`` for each VM sent before that is no longer listed);
- ``heartbeat`` every ``heartbeat`` seconds (0: never), saying whether both watches are up;
- a VM with a task of the collection in flight is marked (``task_in_progress``), so rules can skip it.

Arguments: ``namespace`` (required), ``kubeconfig``, ``context``, ``host``, ``api_key``, ``ca_cert``,
``validate_certs`` (as the modules' KubeVirt connection options), ``heartbeat`` (seconds, default 30),
``watch_timeout`` (seconds a watch lasts before it is renewed, default 300), ``initial_sync`` (default true),
``queue_limit`` (most events waiting to be handed to ansible-rulebook, default 4096). Give the token through a
kubeconfig or the environment (K8S_AUTH_API_KEY), never as ``api_key`` in the rulebook: ansible-rulebook -vv logs
the source arguments.

Events never become code (issue 33): the state words come from annotations that whoever can edit the VM can write,
so each is checked against the collection's vocabulary (anything else: UNKNOWN / Unknown, the raw value only under
``vm.untrusted_raw``), and no string of an event carries template syntax (_common/events.py safe_event: null,
``<field>_percent_encoded``, ``withheld``). ``vm.uid`` is the VM's metadata.uid checked against the UUID pattern.

Bounded: per VM at most one ``change`` waits to be handed to ansible-rulebook (a newer one replaces it: the latest
words), and at most ``queue_limit`` in all; beyond that an event is dropped and the namespace is listed again (a
full sync follows).

The words of a VM whose disks are DataVolumes still being provisioned may differ from vm_info's: the source
watches VMs and VMIs, not DataVolumes and claims.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

try:
    import ansible_collections.converge.virt.plugins.module_utils  # noqa: F401  pylint: disable=unused-import
except ImportError:
    # ansible-rulebook runs a source by its path (runpy.run_path) and puts no collections root on sys.path: in a decision
    # environment (the collection installed under <root>/ansible_collections/converge/virt, no PYTHONPATH) the imports
    # below failed with "No module named 'ansible_collections'". The root this file is installed under is added then.
    _PARTS = os.path.abspath(__file__).split(os.sep)
    if _PARTS[-8:-5] == ['ansible_collections', 'converge', 'virt']:
        sys.path.append(os.sep.join(_PARTS[:-8]) or os.sep)

from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError
from ansible_collections.converge.virt.plugins.module_utils._common.events import Outbox, own_words, print_events, trusted_uuid
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import KUBEVIRT_API, KubeClient

CONNECTION = ('kubeconfig', 'context', 'host', 'api_key', 'ca_cert', 'validate_certs')
DEFAULTS = {'heartbeat': 30.0, 'watch_timeout': 300.0, 'initial_sync': True, 'queue_limit': 4096}
# the outbox's keys never refused
SYNC, HEARTBEAT, ERROR = ('sync',), ('heartbeat',), ('error',)
KINDS = (('virtualmachines', 'VirtualMachine'), ('virtualmachineinstances', 'VirtualMachineInstance'))
WORDS = ('name', 'namespace', 'uid', 'exists', 'vm_state', 'power_state', 'task_state', 'status', 'printable_status', 'phase', 'phase_reason',
         'run_strategy', 'node', 'ready')


def check_args(args):
    """The arguments with defaults; ValueError naming the argument and the reason (secrets never in it)."""
    args = dict(args or {})
    unknown = sorted(set(args) - set(DEFAULTS) - set(CONNECTION) - {'namespace'})
    if unknown:
        raise ValueError('kubevirt_events: %s: unknown argument' % unknown[0])
    if not isinstance(args.get('namespace'), str) or not args['namespace']:
        raise ValueError('kubevirt_events: namespace: required (the namespace whose VirtualMachines are followed)')
    out = dict(DEFAULTS, **args)
    for key in ('heartbeat', 'watch_timeout'):
        try:
            out[key] = float(out[key])
        except (TypeError, ValueError):
            raise ValueError('kubevirt_events: %s: must be a number of seconds' % key) from None
        if out[key] < 0 or (key == 'watch_timeout' and out[key] < 1):
            raise ValueError('kubevirt_events: %s: must be %s' % (key, 'at least 1' if key == 'watch_timeout' else '0 or more'))
    if not isinstance(out['initial_sync'], bool):
        raise ValueError('kubevirt_events: initial_sync: must be true or false')
    try:
        out['queue_limit'] = int(out['queue_limit'])
    except (TypeError, ValueError):
        raise ValueError('kubevirt_events: queue_limit: must be a whole number') from None
    if out['queue_limit'] < 1:
        raise ValueError('kubevirt_events: queue_limit: must be 1 or more')
    return out


def vm_words(name, namespace, vm, vmi):
    """The state words of one VM as vm_info reports them (``vm`` None: it is gone), the collection's words only."""
    view = kobserve.public_view(kobserve.build(name, namespace, vm, vmi, [], []))
    out = own_words({key: view.get(key) for key in WORDS if key in view})
    out['uid'] = trusted_uuid(out.get('uid'))
    out['withheld'] = []
    return out


class KubevirtEvents:
    """Lists and watches of one namespace, turned into events on an asyncio queue."""

    def __init__(self, queue, args):
        self.queue = queue
        self.outbox = None
        self.args = check_args(args)
        self.namespace = self.args['namespace']
        self.loop = None
        self.lock = threading.Lock()
        self.objects = {plural: {} for plural, _kind in KINDS}
        self.sent = {}                 # VM name -> the words last sent
        self.watching = {plural: False for plural, _kind in KINDS}
        self.stopping = threading.Event()
        self.resync = threading.Event()
        # one list and its two watches; a watch of an older generation changes nothing and ends at its next event
        self.generation = 0

    # ------------------------------------------------------------ sending
    def _put(self, payload, key=None):
        self.outbox.put({'converge_virt': dict(payload, namespace=self.namespace)}, key)

    def _overflow(self, _dropped):
        # an event was dropped (queue_limit wait): list again, a full sync follows
        self.resync.set()

    def _words(self, name):
        vm = self.objects['virtualmachines'].get(name)
        return vm_words(name, self.namespace, vm, self.objects['virtualmachineinstances'].get(name) if vm is not None else None)

    def _changed(self, name, kind, action):
        # under the lock: send the VM's words if they differ from the last ones sent
        if name not in self.objects['virtualmachines'] and name not in self.sent:
            return  # a VMI without a VM: not a VirtualMachine of the namespace
        words = self._words(name)
        if self.sent.get(name) == words:
            return
        if words.get('exists'):
            self.sent[name] = words
        else:
            self.sent.pop(name, None)
        # the latest change of a VM replaces the one still waiting
        self._put({'type': 'change', 'kind': kind, 'action': action, 'vm': words, 'task_in_progress': bool(words.get('task_state'))},
                  ('vm', name))

    def _sync(self):
        out = []
        with self.lock:
            # a VM deleted while no watch ran is missing from the new list: say it is gone (its DELETED event was lost)
            for name in sorted(set(self.sent) - set(self.objects['virtualmachines'])):
                words = vm_words(name, self.namespace, None, None)
                out.append({'type': 'change', 'kind': 'VirtualMachine', 'action': 'DELETED', 'vm': words, 'task_in_progress': False})
            self.sent = {}
            for name in sorted(self.objects['virtualmachines']):
                words = self.sent[name] = self._words(name)
                out.append({'type': 'sync', 'vm': words, 'task_in_progress': bool(words.get('task_state'))})
            out.append({'type': 'sync_done', 'count': len(self.sent)})
            # one item: the changes still waiting are older than this list
            self.outbox.drop(lambda key: key[0] == 'vm')
            self.outbox.put([{'converge_virt': dict(payload, namespace=self.namespace)} for payload in out], SYNC)

    # ------------------------------------------------------------ API
    def _client(self):
        return KubeClient(**{key: self.args.get(key) for key in CONNECTION})

    def _list_all(self, client):
        versions = {}
        for plural, _kind in KINDS:
            items, versions[plural] = client.list_with_version(KUBEVIRT_API, self.namespace, plural)
            with self.lock:
                self.objects[plural] = {item['metadata']['name']: item for item in items}
        return versions

    def _current(self, generation):
        return generation == self.generation and not self.stopping.is_set()

    def _watch(self, client, plural, kind, version, generation):
        """Follow one kind, renewing the watch from the last resourceVersion, until it cannot go on or is outdated."""
        while self._current(generation):
            self.watching[plural] = True
            for event in client.watch(KUBEVIRT_API, self.namespace, plural, version, self.args['watch_timeout']):
                if not self._current(generation):
                    return
                obj = event.get('object') or {}
                if event.get('type') == 'ERROR':
                    # 410 Gone (too old a resourceVersion) or another failure: list again
                    return
                version = (obj.get('metadata') or {}).get('resourceVersion') or version
                if event.get('type') == 'BOOKMARK':
                    continue
                name = (obj.get('metadata') or {}).get('name')
                with self.lock:
                    if not self._current(generation):
                        return
                    if event['type'] == 'DELETED':
                        self.objects[plural].pop(name, None)
                    else:
                        self.objects[plural][name] = obj
                    self._changed(name, kind, event['type'])

    def _follow(self):
        """The thread: list, sync, watch both kinds; on any failure wait a little and list again."""
        first = True
        delay = 0.5
        while not self.stopping.is_set():
            self.resync.clear()
            try:
                client = self._client()
                try:
                    versions = self._list_all(client)
                    if self.args['initial_sync'] or not first:
                        self._sync()
                    else:
                        with self.lock:
                            self.sent = {name: self._words(name) for name in self.objects['virtualmachines']}
                    first = False
                    delay = 0.5
                    generation = self.generation
                    for plural, kind in KINDS:
                        threading.Thread(target=self._watch_guarded, args=(self._client(), plural, kind, versions[plural], generation),
                                         daemon=True).start()
                    # until a watch cannot go on: then both are outdated and everything is listed again
                    while not self.resync.wait(1.0) and not self.stopping.is_set():
                        pass
                    with self.lock:
                        self.generation += 1
                finally:
                    client.close()
            except ConvergeError as exc:
                self._put({'type': 'error', 'message': str(exc)}, ERROR)
            if not self.stopping.is_set():
                time.sleep(delay)
                delay = min(delay * 2, 30.0)

    def _watch_guarded(self, client, plural, kind, version, generation):
        try:
            self._watch(client, plural, kind, version, generation)
        except (ConvergeError, ValueError, OSError) as exc:
            self._put({'type': 'error', 'message': str(exc)}, ERROR)
        except Exception as exc:  # pylint: disable=broad-except
            # urllib3 protocol errors when the server goes away mid-stream
            self._put({'type': 'error', 'message': '%s: %s' % (type(exc).__name__, exc)}, ERROR)
        finally:
            if generation == self.generation:
                self.watching[plural] = False
                self.resync.set()
            client.close()

    async def run(self):
        """Follow the namespace until cancelled."""
        self.loop = asyncio.get_running_loop()
        self.outbox = Outbox(self.queue, self.loop, limit=self.args['queue_limit'], overflow=self._overflow, reserved=(SYNC, HEARTBEAT, ERROR))
        thread = threading.Thread(target=self._follow, daemon=True, name='kubevirt-events')
        thread.start()
        try:
            while True:
                if self.args['heartbeat'] > 0:
                    await asyncio.sleep(self.args['heartbeat'])
                    self._put({'type': 'heartbeat', 'watching': all(self.watching.values())}, HEARTBEAT)
                else:
                    await asyncio.sleep(3600)
        finally:
            self.stopping.set()


async def main(queue, args):
    """ansible-rulebook's entry point."""
    await KubevirtEvents(queue, args).run()


if __name__ == '__main__':
    # python kubevirt_events.py NAMESPACE [KUBECONFIG]: print the events as JSON lines (for a person, and for the tests)
    ARGS = {'namespace': sys.argv[1], 'heartbeat': float(os.environ.get('KUBEVIRT_EVENTS_HEARTBEAT', DEFAULTS['heartbeat']))}
    if len(sys.argv) > 2:
        ARGS['kubeconfig'] = sys.argv[2]
    print_events(main, ARGS)
