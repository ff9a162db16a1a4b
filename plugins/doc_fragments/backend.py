# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module of the collection shares: the author, the backend option (plugins/module_utils/_common/registry.py),
the connection options of both backends and their requirements (DOCUMENTATION), and the attributes of a module that
changes things (ACT) or only reads (READ).

A module names two fragments: converge.virt.backend and converge.virt.backend.act (or .read). It keeps its own words
where they differ: its backend description and its check_mode/diff_mode descriptions (and support: none for diff_mode
where it has none) override the fragment's, key by key (ansible-core merges a module's option and attribute entries
over the fragment's). Each text is one string literal: ansible-test's yamllint sanity test reads fragments only so.
"""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Documentation fragment."""

    # the author, the backend option, both backends' connection options and requirements
    DOCUMENTATION = r'''
author:
  - converge.virt developers (@converge-virt)
options:
  backend:
    description:
      - Where the resources live. V(libvirt) (a libvirt/KVM host, reached with the libvirt connection options) or
        V(kubevirt) (objects of O(namespace) in a KubeVirt cluster, reached with the KubeVirt connection options).
    type: str
    choices: [libvirt, kubevirt]
    default: libvirt
  uri:
    description:
      - libvirt connection URI, for example V(qemu:///system), V(qemu+ssh://root@host/system),
        V(qemu+tcp://127.0.0.11:16511/system) or V(qemu+unix:///system?socket=/path/libvirt-sock).
      - A password in the URI is accepted and never shown; prefer O(password).
      - Defaults to the E(LIBVIRT_DEFAULT_URI) environment variable, then V(qemu:///system).
    type: str
  username:
    description:
      - User name for libvirt's SASL authentication, when the URI needs credentials.
    type: str
  password:
    description:
      - Password for libvirt's SASL authentication. Never logged nor returned.
    type: str
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
requirements:
  - libvirt-python for O(backend=libvirt)
  - kubernetes (Python library) for O(backend=kubevirt)
'''

    # the attributes of a module that changes things: each module states in its own words what check mode reports and
    # what the diff shows (or that it has none)
    ACT = r'''
attributes:
  check_mode:
    support: full
    description: Reports what a real run would do and changes nothing.
  diff_mode:
    support: full
    description: Shows what changes, before and after.
'''

    # the attributes of a module that only reads
    READ = r'''
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Reads only.
'''
