"""Issue 33 through the KubeVirt source, end to end: a real ansible-rulebook runs converge.virt.kubevirt_events against
the kube_server fixture (the real stack by default), on every ansible-core the collection claims.

A VirtualMachine created by converge.virt.vm gets annotations, written by whoever may edit the VM, that carry template
expressions which would create a marker file if evaluated: its vm_state / task_state records and a note. The rule
fires for that VM (on its sync and on a change) and runs a deliberately careless playbook that prints the WHOLE event
(``ansible_eda``: on ansible-core < 2.19 that templates every string of it) after checking the VM's uid: the playbook
runs, the words it sees are UNKNOWN, the raw records are withheld (null + percent-encoded), and the marker is never
written.
"""

# pylint: disable=redefined-outer-name,unused-import

import functools
import os
import re

import pytest
import yaml
from kubernetes import client as kclient

from tests.integration.ansible_run import kubevirt_args, ok, run_module
from tests.integration.test_rulebook_e2e import BIN, Rulebook, ansible_bin  # noqa: F401  (the rulebook runner of the libvirt test)
from tests.integration.test_rulebook_e2e import pytestmark  # noqa: F401  (needs ansible-rulebook and Java)
from tests.kubeapi.fixtures import kube_api, kube_server  # noqa: F401  (pytest fixtures)
from tools import matrix

NS = 'default'
NAME = 'ev-hostile'
ATTACK = {
    'converge.virt/vm-state': "{{ lookup('pipe', 'touch $CONVERGE_TEST_MARKER') }}",
    'converge.virt/task-state': "{% if lookup('pipe', 'touch $CONVERGE_TEST_MARKER') %}STOPPING{% endif %}",
    'example.com/note': "#jinja2:variable_start_string:'<<'\n<< lookup('pipe', 'touch $CONVERGE_TEST_MARKER') >>",
}
UUID = r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'

kv = functools.partial(kubevirt_args, {'namespace': NS, 'wait_timeout': 60})


def write_rulebook(tmp_path, kubeconfig):
    """A rulebook for the hostile VM and the careless playbook it runs; the rulebook's path."""
    play = os.path.join(str(tmp_path), 'careless.yml')
    with open(play, 'w', encoding='utf-8') as handle:
        yaml.safe_dump([{'name': 'Careless', 'hosts': 'localhost', 'gather_facts': False, 'tasks': [
            {'name': 'Check the uid', 'ansible.builtin.assert': {'that': ["vm_uid is match('^%s$')" % UUID], 'quiet': True}},
            {'name': 'Print the whole event', 'ansible.builtin.debug': {'var': 'ansible_eda'}},
            {'name': 'Print it again', 'ansible.builtin.debug': {'msg': 'event {{ ansible_eda.event.converge_virt }}'}},
            {'name': 'Say who ran', 'ansible.builtin.debug': {'msg': 'careless ran for uid {{ vm_uid }} (ansible-core {{ ansible_version.full }})'}},
        ]}], handle)
    rulebook = os.path.join(str(tmp_path), 'hostile_kubevirt.yml')
    with open(rulebook, 'w', encoding='utf-8') as handle:
        yaml.safe_dump([{'name': 'Hostile annotations', 'hosts': 'localhost',
                         'sources': [{'converge.virt.kubevirt_events': {'namespace': NS, 'kubeconfig': kubeconfig, 'heartbeat': 0}}],
                         'rules': [{'name': 'The hostile VM', 'condition': (
                             '(event.converge_virt.type == "sync" or event.converge_virt.type == "change") '
                             'and event.converge_virt.vm.name == "%s"' % NAME),
                             'action': {'run_playbook': {'name': play, 'extra_vars': {'vm_uid': '{{ event.converge_virt.vm.uid }}'}}}}]}],
                       handle, sort_keys=False)
    return rulebook


def annotate(api, annotations):
    kclient.CustomObjectsApi(api).patch_namespaced_custom_object('kubevirt.io', 'v1', NS, 'virtualmachines', NAME,
                                                                 {'metadata': {'annotations': annotations}})


@pytest.mark.parametrize('version', matrix.VERSIONS)
def test_annotations_with_template_syntax_are_never_evaluated(kube_server, kube_api, tmp_path, version):
    where = ansible_bin(version)
    if where is None:
        if os.environ.get('CONVERGE_VIRT_REQUIRE_PEERS'):
            raise AssertionError('ansible-core %s: no matrix environment under %s (make matrix-setup)' % (version, matrix.VENVS))
        pytest.skip('ansible-core %s: no matrix environment (make matrix-setup)' % version)
    srv = kube_server
    created = ok(run_module('vm', kv(srv, name=NAME, vcpus=1, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}],
                                     state='present')))
    uid = created['vm']['uid']
    annotate(kube_api, ATTACK)
    marker = tmp_path / 'evaluated'
    rulebook = Rulebook(tmp_path, 'unused', 'kubevirt-' + version, ansible_bin=where, env={'CONVERGE_TEST_MARKER': str(marker)},
                        rulebook=write_rulebook(tmp_path, srv.kubeconfig_path))
    try:
        # the sync of the hostile VM runs the playbook once ...
        rulebook.wait_for(r'careless ran for uid %s' % uid, timeout=120)
        # ... and a change of its records (another hostile word) once more
        annotate(kube_api, {'converge.virt/vm-state': "{{ 7 * 7 }}-{{ lookup('pipe', 'touch $CONVERGE_TEST_MARKER') }}"})
        rulebook.wait_for(r"(?s)careless ran for uid %s.*'type': 'change'.*careless ran for uid %s" % (uid, uid), timeout=120)
        rulebook.wait_for(r'(?s)(PLAY RECAP.*){2}', timeout=60)
        out = rulebook.output()
        assert not marker.exists(), 'ansible-core %s evaluated an annotation: %s was written' % (version, marker)
        assert not re.search(r'failed=[1-9]', out), out[-4000:]
        assert set(re.findall(r'careless ran for uid \S+ \(ansible-core ([0-9]+\.[0-9]+)\.', out)) == {version}, out[-3000:]
        # the playbook saw the collection's unknown word and the raw records withheld, percent-encoded
        assert re.search(r"""['"]vm_state['"]: ['"]UNKNOWN['"]""", out) and re.search(r"""['"]task_state['"]: ['"]UNKNOWN['"]""", out), out[-4000:]
        assert 'vm_state_percent_encoded' in out and '%7B%7B%20lookup' in out, out[-4000:]
        assert 'touch $CONVERGE_TEST_MARKER' not in out, 'a hostile record reached the event in clear'
    finally:
        rulebook.stop()
        run_module('vm', kv(srv, name=NAME, state='absent'))
    assert not marker.exists(), 'ansible-core %s evaluated an annotation: %s was written' % (version, marker)
