"""virtlab: private libvirt/KVM hosts on one machine, and a tiny bootable test guest.

Design
------
Used by the integration tests, molecule scenarios and the demo to get several
independent libvirt "hosts" (each its own libvirtd + virtlogd in a private mount
and UTS namespace, reachable over a unix socket and loopback TCP, able to
live-migrate between each other) without touching the machine's own libvirt.

Modules:

* :mod:`tools.virtlab.hosts` -- :func:`start_hosts`, :func:`stop_hosts`,
  :func:`load_hosts`, :func:`hosts_status`, :func:`kvm_usable`, :class:`HostInfo`;
  its docstring records the migration calls and flags that work.
* :mod:`tools.virtlab.nsinit` -- what runs inside each host's namespaces.
* :mod:`tools.virtlab.sshd` -- ``start_hosts(ssh=True)``: an sshd per host in its namespaces, the lab's
  known_hosts, ssh_config and Ansible inventory, and :func:`~tools.virtlab.sshd.controller_argv`.
* :mod:`tools.virtlab.guest` -- :func:`build_guest`: Debian kernel + busybox
  initramfs built from Debian packages into a cache directory.
* :mod:`tools.virtlab.domains` -- ElementTree builders of the diskless and the
  kernel-booting domain XML, and helpers to start and wait for guests.
* ``python -m tools.virtlab`` -- the command line (see :mod:`tools.virtlab.__main__`).
"""

from .guest import GuestImage, build_guest
from .hosts import HostInfo, LabError, diskless_domain_type, hosts_status, kvm_usable, load_hosts, os_guest_domain_type, start_hosts, stop_hosts

__all__ = [
    "GuestImage",
    "HostInfo",
    "LabError",
    "build_guest",
    "diskless_domain_type",
    "hosts_status",
    "kvm_usable",
    "load_hosts",
    "os_guest_domain_type",
    "start_hosts",
    "stop_hosts",
]
