# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Two failures of the 60-minute chaos campaign (seed 2614) that read 'unexpected error: ...':

* a volume attach whose VM another run deleted after this run observed it ('unexpected error: Domain not found'): now an
  error naming the operation and that the VM was undefined;
* a migration that failed with 'unexpected error: None' (an exception without text): every unexpected error now names
  its type and where the collection's code met it, so the next one can be traced without -vvv.
"""

# pylint: disable=missing-function-docstring,too-few-public-methods

from __future__ import annotations

import types

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, unexpected
from ansible_collections.converge.virt.plugins.module_utils._libvirt import attachments
from ansible_collections.converge.virt.plugins.module_utils._libvirt import connection as lconn
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase

pytestmark = pytest.mark.skipif(not lconn.HAS_LIBVIRT, reason='needs libvirt-python')


def lv_error(code, message):
    exc = libvirt.libvirtError(message)
    exc.err = (code, getattr(libvirt, 'VIR_FROM_QEMU', 10), message, 2, None, None, None, -1, -1)
    return exc


class GoneDomain:
    """A domain another run undefined after it was observed: every call says so."""

    def __getattr__(self, name):
        def call(*_args, **_kwargs):
            raise lv_error(libvirt.VIR_ERR_NO_DOMAIN, "Domain not found: no domain with matching uuid 'ccc6d103' (c2b)")
        return call


def test_an_attach_to_a_vm_deleted_meanwhile_names_it():
    conn = lconn.Connection.__new__(lconn.Connection)
    conn.uri = conn.display_uri = 'qemu:///system'
    conn._secrets = []  # pylint: disable=protected-access
    conn.conn = object()
    view = types.SimpleNamespace(dom=GoneDomain(), name='c2b', inferred_vm_state=lambda: 'STOPPED')
    op = types.SimpleNamespace(kind=phase.ATTACH_CONFIG, volume='keep2.raw', vm='c2b', target='sdb', bus='scsi', path='/p/keep2.raw',
                               pool='chaos', readonly=False)
    with pytest.raises(BackendError) as caught:
        attachments.execute_attachment_operation(conn, view, op, 'raw', owner='test:1')
    message = caught.value.message
    assert 'keep2.raw' in message and 'VM c2b was undefined' in message and 'nothing was attached or detached' in message, message
    assert 'unexpected' not in message


def test_an_unexpected_error_names_its_type_and_where_the_collection_met_it():
    def raise_empty():
        raise lv_error(libvirt.VIR_ERR_INTERNAL_ERROR, None)
    with pytest.raises(libvirt.libvirtError) as empty:
        raise_empty()
    text = unexpected(empty.value)
    assert text.startswith('unexpected error (libvirtError') and text.endswith(': no message'), text
    # this test file is not under plugins/: no place is named
    assert ' at ' not in text.split(':', 1)[0]
    with pytest.raises(Exception) as caught:
        attachments.execute_attachment_operation(None, None, None, None)
    text = unexpected(caught.value)
    assert 'at module_utils/_libvirt/attachments.py:' in text and 'in execute_attachment_operation' in text, text
