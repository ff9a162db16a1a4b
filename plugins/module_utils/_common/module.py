# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The AnsibleModule every module of the collection builds.

AnsibleModule logs its invocation to syslog / the journal of the managed host while
it is being built, and a validation failure returns the parameters as
``invocation.module_args`` before the module's own code runs. Only the values of
``no_log`` options are masked there. A secret inside an option value (the password
or a ``?password=`` query value of a libvirt URI, cloud-init user data in a KubeVirt
``spec``, a ``https://user:pw@`` DataVolume import URL) would be shown as given.

:class:`ConvergeModule` registers those secrets (:func:`redact.declared_secrets` of
the raw parameters, also in their escaped forms: a dict option is logged as its
``str()``) as no_log values as soon as the parameters are read, before validation,
the invocation log line or any result: AnsibleModule then masks them everywhere
(journal, syslog, results, errors, invocation).
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.converge.virt.plugins.module_utils._common.redact import declared_secrets, secret_forms


class ConvergeModule(AnsibleModule):
    """AnsibleModule whose option values' secrets are no_log values before anything is logged or returned."""

    def _load_params(self):
        super()._load_params()
        # the raw parameters, as the task gave them: ansible's own keys (_ansible_*) hold no user values
        user_params = dict((key, value) for key, value in (self.params or {}).items() if not str(key).startswith('_ansible_'))
        self.no_log_values.update(secret_forms(declared_secrets(user_params)))
