"""pytest plugin: private libvirt hosts and a tiny bootable guest for integration tests.

Load it from a conftest.py with::

    pytest_plugins = ["tests.integration.virtlab_fixtures"]

Session fixtures:

* ``libvirt_hosts`` -- two private libvirt hosts (:func:`tools.virtlab.hosts.start_hosts`),
  stopped at the end of the session.  They use their own addresses/ports
  (127.0.0.21.., TCP 16621.., migration 49400..; see :func:`virtlab_layout_for`,
  shifted per pytest-xdist worker) so they do not collide with a lab started by
  hand with the CLI defaults (127.0.0.11.., 16611.., 49300..).
  ``VIRTLAB_TEST_STATE_DIR`` overrides the state directory (default: a pytest
  temporary directory).
* ``virtlab_layout`` -- ``virtlab_layout_for(slot)``: start_hosts() arguments for a
  test that starts its own lab (slot >= 1), e.g. to test stopping hosts.
* ``guest_image`` -- the kernel + initramfs of :mod:`tools.virtlab.guest`, built
  once into ``VIRTLAB_GUEST_CACHE`` (default ``build/guest``).
* ``host_conns`` -- read-write libvirt connections to the hosts (unix socket URIs).

Helpers for tests, re-exported from :mod:`tools.virtlab.domains` (XML built with ElementTree):
:func:`diskless_domain_xml`, :func:`kernel_domain_xml`, :func:`start_diskless_guest`,
:func:`start_kernel_guest`, :func:`wait_for_console`, :func:`wait_for_state`,
:func:`remove_domain`.
"""

import os

import pytest

from tools.virtlab import guest as virtlab_guest
from tools.virtlab import hosts as virtlab_hosts
from tools.virtlab.domains import (console_log_path, diskless_domain_xml, kernel_domain_xml, remove_domain, start_diskless_guest, start_kernel_guest,
                                   wait_for_console, wait_for_state)

__all__ = [
    "console_log_path",
    "diskless_domain_xml",
    "kernel_domain_xml",
    "remove_domain",
    "start_diskless_guest",
    "start_kernel_guest",
    "wait_for_console",
    "wait_for_state",
    "guest_image",
    "host_conns",
    "libvirt_hosts",
    "host",
    "conn",
    "virtlab_layout",
    "virtlab_layout_for",
    "virtlab_state_dir",
]

TEST_NAME_PREFIX = "vlt-"


def _worker_index():
    """0, or N for the pytest-xdist worker gwN; VIRTLAB_WORKER=N gives a separate pytest run its own addresses and ports."""
    if os.environ.get("VIRTLAB_WORKER", "").isdigit():
        return int(os.environ["VIRTLAB_WORKER"])
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    digits = worker[2:] if worker.startswith("gw") else ""
    return int(digits) if digits.isdigit() else 0


def virtlab_layout_for(slot=0):
    """start_hosts() keyword arguments for lab number slot (0 is libvirt_hosts), distinct per xdist worker.

    A slot has room for 5 hosts: addresses 127.0.<worker>.<21 + 10 * slot>..., TCP ports
    16621 + 40 * worker + 10 * slot..., migration ports 49400 + 400 * worker + 100 * slot...
    (20 per host).
    """
    worker = _worker_index()
    return {
        "first_address": f"127.0.{worker}.{21 + 10 * slot}",
        "name_prefix": TEST_NAME_PREFIX if slot == 0 else f"vlt{slot}-",
        "first_tcp_port": 16621 + 40 * worker + 10 * slot,
        "first_migration_port": 49400 + 400 * worker + 100 * slot,
        "migration_ports_per_host": 20,
    }


@pytest.fixture(scope="session")
def virtlab_state_dir(tmp_path_factory):
    """Directory holding the session's private hosts."""
    configured = os.environ.get("VIRTLAB_TEST_STATE_DIR")
    if configured:
        configured = os.path.join(os.path.abspath(configured), os.environ.get("PYTEST_XDIST_WORKER", "main"))
        os.makedirs(configured, exist_ok=True)
        return configured
    return str(tmp_path_factory.mktemp("virtlab"))


@pytest.fixture(scope="session")
def virtlab_layout():
    """The function virtlab_layout_for(slot): start_hosts() arguments for a test's own lab (use slot >= 1)."""
    return virtlab_layout_for


@pytest.fixture(scope="session")
def libvirt_hosts(virtlab_state_dir):  # pylint: disable=redefined-outer-name
    """Two running private libvirt hosts (list of HostInfo), stopped at session end."""
    started = virtlab_hosts.start_hosts(2, virtlab_state_dir, **virtlab_layout_for(0))
    try:
        yield started
    finally:
        virtlab_hosts.stop_hosts(virtlab_state_dir)


@pytest.fixture(scope="module")
def host(libvirt_hosts):  # pylint: disable=redefined-outer-name
    """The first of libvirt_hosts, for a test module that works on one host (a module may define its own)."""
    return libvirt_hosts[0]


@pytest.fixture(scope="module")
def conn(host):  # pylint: disable=redefined-outer-name
    """A read-write connection to ``host``, closed at the end of the test module."""
    import libvirt  # pylint: disable=import-outside-toplevel
    connection = libvirt.open(host.uri)
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture(scope="session")
def host_conns(libvirt_hosts):  # pylint: disable=redefined-outer-name
    """Read-write connections (unix socket URIs) to libvirt_hosts, in the same order."""
    import libvirt  # pylint: disable=import-outside-toplevel
    conns = [libvirt.open(host.uri) for host in libvirt_hosts]
    try:
        yield conns
    finally:
        for conn in conns:
            try:
                conn.close()
            except libvirt.libvirtError:
                pass


@pytest.fixture(scope="session")
def guest_image():
    """The bootable test guest (built once, reused from the cache afterwards)."""
    return virtlab_guest.build_guest(os.environ.get("VIRTLAB_GUEST_CACHE") or virtlab_guest.DEFAULT_CACHE_DIR)
