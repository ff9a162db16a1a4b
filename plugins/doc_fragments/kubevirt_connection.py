# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection options shared by the KubeVirt side of every module."""

from __future__ import annotations

# The option entries and requirements, also composed into the converge.virt.backend fragment's ACT and READ variants.
OPTIONS = r'''
  kubeconfig:
    description:
      - Path of a kubeconfig file (O(backend=kubevirt) only).
      - Defaults to the E(K8S_AUTH_KUBECONFIG) environment variable, then E(KUBECONFIG) / C(~/.kube/config),
        then the in-cluster service account.
      - When neither a kubeconfig nor O(host) is found and the in-cluster service account of the pod is used, the task
        warns naming it (it may not be the cluster or the identity the task meant).
    type: path
  context:
    description:
      - Context of the kubeconfig to use (O(backend=kubevirt) only).
      - Defaults to the E(K8S_AUTH_CONTEXT) environment variable, then the kubeconfig's current context.
    type: str
  host:
    description:
      - URL of the Kubernetes API server, overriding the kubeconfig's (O(backend=kubevirt) only).
      - Defaults to the E(K8S_AUTH_HOST) environment variable.
      - A credential (O(api_key), or one from the kubeconfig) sent to an V(http://) URL travels unencrypted; the task warns.
    type: str
  api_key:
    description:
      - Bearer token for the API server (O(backend=kubevirt) only). Never logged nor returned.
      - Defaults to the E(K8S_AUTH_API_KEY) environment variable.
    type: str
  ca_cert:
    description:
      - Path of the CA certificate that signed the API server's certificate (O(backend=kubevirt) only).
      - Defaults to the E(K8S_AUTH_SSL_CA_CERT) environment variable.
    type: path
  validate_certs:
    description:
      - Verify the API server's TLS certificate (O(backend=kubevirt) only).
      - Defaults to the E(K8S_AUTH_VERIFY_SSL) environment variable, then to the kubeconfig's setting (verify).
      - A E(K8S_AUTH_VERIFY_SSL) that is set but is not a boolean word (V(true)/V(false), V(yes)/V(no), V(on)/V(off), V(1)/V(0))
        fails the task naming the variable, even when this option is given; it never turns verification off.
    type: bool
  namespace:
    description:
      - Namespace of the objects the task manages (VirtualMachines, claims and DataVolumes, migrations) (O(backend=kubevirt) only).
    type: str
    default: default
'''

REQUIREMENTS = r'''
  - kubernetes (Python library) for O(backend=kubevirt)
'''


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Documentation fragment."""

    DOCUMENTATION = 'options:\n' + OPTIONS + 'requirements:\n' + REQUIREMENTS
