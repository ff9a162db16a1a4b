# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the vm module does the same on every backend: its argument spec, the ``vms`` items, execution options and readiness.

:func:`run_vm` is the vm module's one runner; each backend's vm module (``_libvirt/vm_converge.py``,
``_kubevirt/vm_converge.py``) parses its own declarations and builds its own VM (a ``_common.driver.VmBackend``);
everything here is backend-neutral (it imports no backend).
"""

from __future__ import annotations

import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.converge.virt.plugins.module_utils._common import readiness
from ansible_collections.converge.virt.plugins.module_utils._common.driver import VmOptions, finish_fleet, run_fleet
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration, WaitTimeout
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.redact import SECRET_SPEC_KEYS, declared_secrets, secret_forms
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import (
    BEHAVIOUR_ARGS, DEFINITION_ARGS, STATE_CHOICES, WAIT_ARGS)
from ansible_collections.converge.virt.plugins.module_utils._phase import readiness as readiness_phase, tasks

DEFAULT_STATE = 'present'
# definition options that belong to one VM only: refused at the top level with vms (they cannot be every VM's default)
PER_VM_ONLY = ('uuid', 'data_volume_templates')


def definition_args(definitions):
    """The definition options of every backend: the shared table, then each backend's own (top level, per disk, per interface).

    ``definitions``: backend name -> :class:`~._common.provider.VmDefinition` (``_providers.vm_definitions()``).
    """
    args = dict(DEFINITION_ARGS)
    disk_options = dict(DEFINITION_ARGS['disks']['options'])
    iface_options = dict(DEFINITION_ARGS['interfaces']['options'])
    for definition in definitions.values():
        disk_options.update(definition.disk_args)
        iface_options.update(definition.iface_args)
    args['disks'] = dict(DEFINITION_ARGS['disks'], options=disk_options)
    args['interfaces'] = dict(DEFINITION_ARGS['interfaces'], options=iface_options)
    for definition in definitions.values():
        args.update(definition.args)
    return args


def fleet_item_options(definitions):
    """The argument spec of one item of ``vms`` (state has no default: an item without one takes the top-level state, else present)."""
    options = dict(name=dict(type='str', required=True), state=dict(type='str', choices=STATE_CHOICES))
    options.update(definition_args(definitions))
    return options


def refuse_other_definition(params, backend, definitions, prefix=''):
    """Definition options of another backend are an error naming them (nothing is silently ignored)."""
    for owner, definition in definitions.items():
        if owner == backend:
            continue
        reason = definition.refusal.format(backend=backend)
        for key in definition.top:
            if params.get(key) is not None:
                raise InvalidDeclaration(prefix + key, reason)
        for list_key, keys in (('disks', definition.disk_keys), ('interfaces', definition.iface_keys)):
            for index, item in enumerate(params.get(list_key) or []):
                for key in keys:
                    if item.get(key) is not None:
                        raise InvalidDeclaration('%s%s[%d].%s' % (prefix, list_key, index, key), reason)


def fleet_defaults(params, count, definitions):
    """The top-level state and definition options given with ``vms``: the defaults of every item (an item's own value wins).

    Options that belong to one VM only are refused, naming the field: uuid, data_volume_templates, an interface's
    mac, and a writable disk that two or more items would share.
    """
    refuse_other_definition(params, params['backend'], definitions)
    defaults = {}
    for key in ('state',) + tuple(definition_args(definitions)):
        if key == 'xml' or params.get(key) is None:
            continue
        if key in PER_VM_ONLY:
            raise InvalidDeclaration(key, 'belongs to one VM and cannot be the default of every item of vms; set it in the vms items')
        defaults[key] = params[key]
    for index, iface in enumerate(defaults.get('interfaces') or []):
        if iface.get('mac') is not None:
            raise InvalidDeclaration('interfaces[%d].mac' % index, 'a MAC address belongs to one VM and cannot be the default of every item '
                                     'of vms; set interfaces in the vms items')
    if count > 1:
        for index, disk in enumerate(defaults.get('disks') or []):
            shared = not (disk.get('readonly') or disk.get('device') == 'cdrom' or disk.get('image'))
            if shared:
                raise InvalidDeclaration('disks[%d]' % index, 'as the default of every item of vms this writable disk would be attached to '
                                         'every VM; set disks in the vms items (or make it readonly)')
    return defaults


def _leaves(value, secret_keys=frozenset()):
    """(text, below) for every non-empty string and number inside ``value`` (nested dicts and lists; ansible's own
    ``_ansible_*`` keys skipped): ``below`` says whether it sits under one of ``secret_keys``."""
    stack = [(value, False)]
    while stack:
        value, below = stack.pop()
        if isinstance(value, dict):
            stack.extend((item, below or key in secret_keys) for key, item in value.items() if not str(key).startswith('_ansible_'))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, below) for item in value)
        elif isinstance(value, str) and value:
            yield value, below
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield str(value), below


def cloud_init_secrets(params):
    """Every value inside the ``cloud_init.user_data`` of the parameters and of each ``vms`` item (as ansible's no_log lists them)."""
    sources = [params] + [item for item in (params.get('vms') or []) if isinstance(item, dict)] if isinstance(params, dict) else []
    data = [source['cloud_init'].get('user_data') for source in sources if isinstance(source.get('cloud_init'), dict)]
    return set(text for text, _below in _leaves(data))


# a user data value this short hides nothing and, masked, would mangle every result that contains it ('/', 'ALL', 'yes')
PUBLIC_LENGTH = 3
# the options whose values are secret wherever they appear
SECRET_OPTIONS = frozenset(('user_data', 'password')) | SECRET_SPEC_KEYS


def unmasked_user_data_values(params):
    """The user data values that need no mask: public by the task's own hand or too short to hide anything.

    Ansible masks each value of a no_log dict everywhere in the output, also inside longer strings: user data
    ``{hostname: web-1, users: [{shell: /bin/sh}]}`` turned the VM name ``web-1`` into VALUE_SPECIFIED_IN_NO_LOG_PARAMETER
    and ``/`` in every path into ``********``. A user data value the task also gives in an option that is not secret
    (the VM's name, a meta-data host name, a disk path) is public by the task's own hand, and a value of at most
    PUBLIC_LENGTH characters (``/``, ``ALL``, ``yes``) hides nothing. A value that is also another secret (a password,
    a URI's password) stays masked, and so does every other user data value.
    """
    public = set(text for text, below in _leaves(params, SECRET_OPTIONS) if not below)
    other_secrets = set(declared_secrets(params)) | set(text for text, below in _leaves(params, SECRET_OPTIONS - {'user_data'}) if below)
    return set(value for value in cloud_init_secrets(params)
               if (len(value) <= PUBLIC_LENGTH or value in public) and value not in other_secrets)


class VmModule(ConvergeModule):
    """The vm module's AnsibleModule: user data (top level and in ``vms`` items) is a no_log value before anything is logged.

    AnsibleModule registers a no_log option's values only once it validated the options, and never those inside the
    items of ``vms`` (a list of dicts it does not validate); it writes its invocation to the journal meanwhile.
    """

    def _load_params(self):
        super()._load_params()
        self.no_log_values.update(secret_forms(cloud_init_secrets(self.params)))

    def _unmask_public_user_data_values(self):
        """See :func:`unmasked_user_data_values`: called just before the result is masked and returned."""
        if self.params:
            self.no_log_values.difference_update(secret_forms(unmasked_user_data_values(self.params)))

    def exit_json(self, **kwargs):
        self._unmask_public_user_data_values()
        super().exit_json(**kwargs)

    def fail_json(self, msg, **kwargs):
        self._unmask_public_user_data_values()
        super().fail_json(msg, **kwargs)


def argument_spec(shared, definitions):
    """The vm module's argument spec (in this order: AnsibleModule reports the first invalid option of it).

    ``shared``: the registry's argument spec (backend and every backend's connection options); ``definitions``: see :func:`definition_args`.
    """
    shared = dict(shared)
    spec = dict(
        backend=shared.pop('backend'),
        delete_volumes=dict(type='bool', default=False),
        name=dict(type='str'),
        state=dict(type='str', choices=STATE_CHOICES),
        vms=dict(type='list', elements='dict'),
        parallel=dict(type='int', default=8),
        wait_for=dict(type='str', choices=list(readiness_phase.READINESS)),
        wait_for_port=dict(type='int', default=readiness.DEFAULT_PORT),
    )
    spec.update(shared)  # the connection options of every backend
    spec.update(WAIT_ARGS)
    spec.update(definition_args(definitions))
    spec.update(BEHAVIOUR_ARGS)
    return spec


def new_module(spec):
    """The vm module's AnsibleModule (``spec``: :func:`argument_spec`), ``state`` defaulted for a single VM (an item of ``vms`` takes the top-level one)."""
    module = VmModule(argument_spec=spec, supports_check_mode=True, mutually_exclusive=[('name', 'vms'), ('xml', 'vms')],
                      required_one_of=[('name', 'vms', 'xml')])
    if not module.params['vms']:
        module.params['state'] = module.params['state'] or DEFAULT_STATE
    return module


def options_from(params):
    """Execution options, validated."""
    for field in ('wait_timeout', 'shutdown_timeout', 'lock_timeout'):
        tasks.check_timeout(field, params[field])
    return VmOptions(wait=params['wait'], wait_timeout=params['wait_timeout'], shutdown_timeout=params['shutdown_timeout'],
                     force_stop=params['force_stop'], lock_timeout=params['lock_timeout'], if_moved=params.get('if_moved') or 'fail')


def fleet_items(module, make, definitions):
    """Validate every item of ``vms`` (another backend's definition options refused, then ``make(params)``); return the declarations (nothing touched yet)."""
    items = []
    validator = ArgumentSpecValidator(fleet_item_options(definitions))
    defaults = fleet_defaults(module.params, len(module.params['vms']), definitions)
    for index, item in enumerate(module.params['vms']):
        checked = validator.validate(item)
        # an item's no_log values (cloud_init.user_data) are hidden like the top-level ones
        if getattr(module, 'no_log_values', None) is not None:  # (an AnsibleModule always has it)
            module.no_log_values.update(checked._no_log_values)  # pylint: disable=protected-access
        if checked.error_messages:
            raise InvalidDeclaration('vms[%d]' % index, '; '.join(checked.error_messages))
        params = dict(checked.validated_parameters)
        inherited = set(key for key in defaults if params.get(key) is None)
        if params.get('xml'):
            # a complete domain XML is the whole definition: a top-level definition option would be ignored for it
            ignored = sorted(inherited - {'state', 'autostart'})
            if ignored:
                raise InvalidDeclaration('vms[%d].xml' % index, 'a complete domain XML takes no top-level definition option (%s); '
                                         'put this VM in its own task or write them into its XML' % ', '.join(ignored))
        params.update((key, defaults[key]) for key in inherited)
        params['state'] = params['state'] or DEFAULT_STATE
        params['restart_on_change'] = module.params['restart_on_change']
        try:
            refuse_other_definition(params, module.params['backend'], definitions)
            items.append(make(params))
        except InvalidDeclaration as exc:
            if re.split(r'[.\[]', exc.field, maxsplit=1)[0] in inherited:
                raise InvalidDeclaration(exc.field, '%s (the top-level default of vms[%d])' % (exc.reason, index))
            raise InvalidDeclaration('vms[%d].%s' % (index, exc.field), exc.reason)
    names = [name for _decl, _spec, name in items]
    duplicates = sorted(set(n for n in names if names.count(n) > 1))
    if duplicates:
        raise InvalidDeclaration('vms', 'the same VM is declared more than once: %s' % ', '.join(duplicates))
    if module.params['parallel'] < 1:
        raise InvalidDeclaration('parallel', 'must be at least 1')
    return items


def readiness_wanted(params, agent, no_port=None):
    """The declared ``wait_for`` (validated), or None.

    ``agent``: whether the VM has a guest agent channel; ``no_port``: why the backend refuses ``wait_for: port`` (None: it takes it).
    """
    wanted = params.get('wait_for')
    if wanted is None:
        return None
    if no_port and wanted == readiness_phase.PORT:
        raise InvalidDeclaration('wait_for', no_port)
    if not params['wait']:
        raise InvalidDeclaration('wait_for', 'needs wait: true')
    if not 1 <= params['wait_for_port'] <= 65535:
        raise InvalidDeclaration('wait_for_port', 'must be a TCP port (1-65535), got %s' % params['wait_for_port'])
    if params.get('state') not in (None, 'running') and not params.get('vms'):
        raise InvalidDeclaration('wait_for', 'applies to a VM declared running, not %s' % params['state'])
    readiness_phase.check_wait_for(wanted, agent)
    return wanted


def _ready(module, probe_of, wanted, name):
    """Wait until VM ``name`` reaches ``wanted``; return its readiness keys (readiness, address). Raises WaitTimeout."""
    return readiness.public(readiness.wait_ready(probe_of(name), wanted, module.params['wait_timeout'], module.params['wait_for_port'], name=name))


def await_readiness(module, probe_of, wanted, changed, result):
    """Wait until the VM of ``result`` (single VM) is ready; fail the task, keeping ``changed``, when it does not get there in time."""
    try:
        result['vm'].update(_ready(module, probe_of, wanted, result['vm']['name']))
    except WaitTimeout as exc:
        module.fail_json(changed=changed, **dict(result, **exc.to_result()))


def finish_items(module, probe_of, wanted, items, changed, results):
    """Exit with the results of ``vms`` (the VMs declared running waited for first when ``wanted``)."""
    finish_fleet(module, changed, fleet_readiness(module, probe_of, wanted, items, results) if wanted else results)


def fleet_readiness(module, probe_of, wanted, items, results):
    """Wait for the readiness of every VM of a fleet declared running that converged; one that does not get there in time fails."""
    states = dict((name, decl.state) for decl, _spec, name in items)
    waiting = [r for r in results if not r.get('failed') and states.get(r['name']) == 'running']

    def one(result):
        try:
            result.update(_ready(module, probe_of, wanted, result['name']))
        except WaitTimeout as exc:
            result.update(exc.to_result(), failed=True)

    from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel  # fleets only
    with ThreadPoolExecutor(max_workers=min(module.params['parallel'], max(1, len(waiting)))) as pool:
        list(pool.map(one, waiting))
    return results


def run_vm(module, provider, backend, definitions):
    """The vm module, on every backend: one VM (``name`` or ``xml``) or the items of ``vms``, converged through the backend's VM.

    ``provider``: the selected :class:`~._common.provider.Provider`; ``backend``: its vm module (``_<backend>/vm_converge.py``:
    ``options``, ``declaration``, ``agent``, ``NO_PORT``, ``vm``, ``fleet_snapshot``, ``probe``); ``definitions``: see
    :func:`definition_args`. Everything is validated before the backend is reached; every error leaves through the session.
    """
    params = module.params
    with provider.session(module) as session:
        options = backend.options(params)
        refuse_other_definition(params, provider.name, definitions)
        if params['vms']:
            single, items = None, fleet_items(module, lambda item: backend.declaration(item, params), definitions)
        else:
            single, items = backend.declaration(params, params), None
        wanted = None if module.check_mode else readiness_wanted(params, backend.agent(params), no_port=backend.NO_PORT)
        with session.connect() as connection:
            def probe_of(name):
                return backend.probe(connection, params, name)

            if items is not None:
                changed, results = run_fleet(items, lambda name: backend.vm(connection, params, name), options, module.check_mode,
                                             params['parallel'], snapshot=backend.fleet_snapshot(connection, params), redact=connection.redact)
                finish_items(module, probe_of, wanted, items, changed, results)
            decl, spec, name = single
            changed, result = backend.vm(connection, params, name).converge(decl, spec, options, module.check_mode)
            if wanted:
                await_readiness(module, probe_of, wanted, changed, result)
    module.exit_json(changed=changed, **result)
