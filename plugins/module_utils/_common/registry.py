# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The backend registry: which backends exist, which options each owns per resource, and how a module runs one.

A module builds its argument spec with :func:`argument_spec` (its own options, ``backend`` and every
backend's connection options) and hands over with :func:`run`::

    from ansible_collections.converge.virt.plugins.module_utils._common.runners import migration_runs

    def main():
        module = ConvergeModule(argument_spec=registry.argument_spec(name=dict(type='str')), supports_check_mode=True)
        registry.run('host', module, migration_runs.load, 'run_host')

``run`` refuses every option the selected backend does not own (:data:`OPTION_GROUPS`, in the order
of the table, with the resource's wording) and then calls the named runner of the selected backend's
module, which the loader imports. A loader (``_common/runners/<module>.py``, one per module of runners,
shared by the modules that use it) names both backends' modules in import statements inside its
function: AnsiballZ packs what a module names, and only the selected backend's code is imported (a
libvirt task never compiles the KubeVirt backend). This module imports nothing of either backend (a
loader here would pack every backend's runners into every module).

Adding a backend: its connection options in :data:`CONNECTION_ARGS`, its name in :data:`BACKENDS`,
its own options per resource in :data:`OPTION_GROUPS`, one runner per resource and one import per loader in _common/runners.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import LIBVIRT_CONNECTION_ARGS
from ansible_collections.converge.virt.plugins.module_utils._common.volume_options import KUBEVIRT_ITEM_ONLY, LIBVIRT_ONLY

BACKENDS = ('libvirt', 'kubevirt')
DEFAULT_BACKEND = 'libvirt'

# Argument specs of each backend's connection (documented by the converge.virt.<backend>_connection fragments).
CONNECTION_ARGS = {
    'libvirt': LIBVIRT_CONNECTION_ARGS,
    'kubevirt': dict(
        kubeconfig=dict(type='path'),
        context=dict(type='str'),
        host=dict(type='str'),
        api_key=dict(type='str', no_log=True),
        ca_cert=dict(type='path'),
        validate_certs=dict(type='bool'),
        namespace=dict(type='str', default='default'),
    ),
}

LIBVIRT_CONNECTION = ('uri', 'username', 'password')
KUBEVIRT_CONNECTION = ('kubeconfig', 'context', 'host', 'api_key', 'ca_cert', 'validate_certs')

# How a resource words the refusal of another backend's option ({key}, {owner}: the backend owning it, {backend}: the selected one).
NOT_SUPPORTED = '{key}: is a {owner} option and is not supported with backend {backend}'
NOT_USED = '{key}: is a {owner} connection option and is not used with backend {backend}'
SET_BACKEND = '{key}: is a {owner} option; set backend: {owner}'


class OptionGroup:  # pylint: disable=too-few-public-methods
    """The options one backend owns for one resource, and how the others refuse them.

    ``owns``: option names, in the order they are checked; ``refusal``: the message template another
    backend fails with when one of them is set; ``field``: whether the failure names it as ``field``;
    ``unset``: option values that count as not given (``namespace: default`` is the default);
    ``wording``: a template per option that is worded apart from the others;
    ``required``: options this backend cannot run without;
    ``item_owns``: options owned both at the top and in each item of the list option ``items`` (named ``items[i].key``).
    """

    def __init__(self, owns, refusal=NOT_SUPPORTED, field=True, unset=None, wording=None,  # pylint: disable=too-many-arguments
                 required=(), item_owns=(), items=None):
        self.owns = tuple(owns)
        self.required = tuple(required)
        self.item_owns = tuple(item_owns)
        self.items = items
        self.refusal = refusal
        self.wording = dict(wording or {})
        self.field = field
        self.unset = dict(unset or {})

    def given(self, params):
        """The first owned option set in ``params``, or None."""
        for key in self.owns:
            value = params.get(key)
            if value is not None and (key not in self.unset or value != self.unset[key]):
                return key
        if self.item_owns:
            items = [('', params)] + [('%s[%d].' % (self.items, index), item) for index, item in enumerate(params.get(self.items) or [])]
            for prefix, item in items:
                for key in self.item_owns:
                    if item.get(key) is not None:
                        return prefix + key
        return None


# resource -> backend -> the options only that backend takes (other backends refuse them).
OPTION_GROUPS = {
    'host': {
        'libvirt': OptionGroup(LIBVIRT_CONNECTION, field=False),
        'kubevirt': OptionGroup(('node',), field=False),
    },
    'migration_info': {
        'libvirt': OptionGroup(('uri', 'uris', 'username', 'password'), field=False),
        'kubevirt': OptionGroup(()),
    },
    'migration': {
        'libvirt': OptionGroup(LIBVIRT_CONNECTION + ('target_uri', 'target_uris', 'target_username', 'target_password', 'bandwidth',
                                                     'max_downtime', 'completion_timeout')),
        'kubevirt': OptionGroup(('target_node', 'source_node', 'pending_timeout') + KUBEVIRT_CONNECTION, field=False),
    },
    'snapshot_info': {
        'libvirt': OptionGroup(LIBVIRT_CONNECTION, required=('vm',)),
        'kubevirt': OptionGroup(KUBEVIRT_CONNECTION, refusal=SET_BACKEND),
    },
    'snapshot': {
        'libvirt': OptionGroup(LIBVIRT_CONNECTION + ('memory', 'children'), unset={'children': False},
                               wording={'children': '{key}: is a {owner} option (KubeVirt snapshots have no parent and no children)'}),
        'kubevirt': OptionGroup(KUBEVIRT_CONNECTION + ('wait_timeout', 'deletion_policy', 'target_vm', 'failure_deadline'), refusal=SET_BACKEND),
    },
    'volume_info': {
        'libvirt': OptionGroup(('pool',) + LIBVIRT_CONNECTION),
        'kubevirt': OptionGroup(KUBEVIRT_CONNECTION, refusal=SET_BACKEND),
    },
    'volume': {
        'libvirt': OptionGroup((), item_owns=LIBVIRT_ONLY, items='volumes'),
        'kubevirt': OptionGroup(('wait_timeout',) + KUBEVIRT_CONNECTION, refusal=SET_BACKEND,
                                item_owns=KUBEVIRT_ITEM_ONLY, items='volumes'),
    },
    'vm_info': {
        'libvirt': OptionGroup(LIBVIRT_CONNECTION, refusal=NOT_USED),
        'kubevirt': OptionGroup(KUBEVIRT_CONNECTION + ('namespace',), refusal=NOT_USED, unset={'namespace': 'default'},
                                wording={'namespace': '{key}: is a {owner} option and is not used with backend {backend}'}),
    },
    # vm: the connection options here; the definition options (top level, per disk and interface, per item of vms) in _common.vm_run
    'vm': {
        'libvirt': OptionGroup(LIBVIRT_CONNECTION, refusal=NOT_USED),
        'kubevirt': OptionGroup(KUBEVIRT_CONNECTION + ('namespace',), refusal=NOT_USED, unset={'namespace': 'default'},
                                wording={'namespace': '{key}: is a {owner} option and is not used with backend {backend}'}),
    },
    'reconcile': {
        'libvirt': OptionGroup(LIBVIRT_CONNECTION),
        'kubevirt': OptionGroup(KUBEVIRT_CONNECTION + ('namespace',), refusal=SET_BACKEND, unset={'namespace': 'default'}),
    },
}


def argument_spec(**own):
    """The argument spec of a module: ``backend``, every backend's connection options, then the module's own (``own`` wins)."""
    spec = dict(backend=dict(type='str', choices=list(BACKENDS), default=DEFAULT_BACKEND))
    for backend in BACKENDS:
        spec.update(CONNECTION_ARGS[backend])
    spec.update(own)
    return spec


def refused_option(resource, params):
    """``(field, message, named)`` for the first option of another backend set in ``params`` (or a required one missing), or None.

    Nothing is silently ignored: an option the selected backend does not take is a mistake the user hears about.
    """
    backend = params['backend']
    groups = OPTION_GROUPS[resource]
    for owner, group in groups.items():
        if owner == backend:
            continue
        key = group.given(params)
        if key is not None:
            return key, group.wording.get(key, group.refusal).format(key=key, owner=owner, backend=backend), group.field
    for key in groups[backend].required:
        if not params.get(key):
            return key, '%s: is required with backend %s' % (key, backend), groups[backend].field
    return None


def refuse_other_backend(resource, params):
    """Raises :class:`InvalidDeclaration` for the first option of another backend set in ``params``."""
    refused = refused_option(resource, params)
    if refused:
        key, message, _named = refused
        raise InvalidDeclaration(key, message[len(key) + 2:])


def run(resource, module, load, runner, check=None):
    """Runs ``resource`` with the backend the task selects: its options checked, its runner imported and called with the module.

    ``load(backend)`` imports and returns the backend's module of runners (a ``_common/runners`` loader); ``runner``
    names its function that takes the module. ``check(params)``, when given, runs after the backend's options are checked; its
    :class:`InvalidDeclaration` fails the module.
    """
    refused = refused_option(resource, module.params)
    if refused:
        key, message, named = refused
        if named:
            module.fail_json(msg=message, field=key)
        module.fail_json(msg=message)
    if check is not None:
        try:
            check(module.params)
        except InvalidDeclaration as exc:
            module.fail_json(**exc.to_result())
    return getattr(load(module.params['backend']), runner)(module)
