"""converge.virt.vm and vm_info with backend kubevirt, through the ansible CLI, against the Kubernetes API test server.

The server (tests/kubeapi) emulates KubeVirt's controllers and virt-api and
sets conditions and phases the way KubeVirt does; the collection derives its
words independently from them. Covers every declared state and transition,
idempotence, check mode, the fleet form, each injected fault's status word, a
real 409 refusal, restart producing a new instance, declared-fields-only
comparison, keeping DataVolumes on delete, bad input, and the token never
showing up in a result.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import functools
import json
import os

import pytest

from tests.integration.ansible_run import kubevirt_args, ok, run_module
from tests.kubeapi.fixtures import kube_server  # noqa: F401  (pytest fixture)

NS = 'default'
CDI = ('cdi.kubevirt.io', 'datavolumes')


kv = functools.partial(kubevirt_args, {'namespace': NS, 'wait_timeout': 60})


def small(srv, name, **args):
    base = dict(name=name, vcpus=1, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}])
    base.update(args)
    return kv(srv, **base)


def vm_obj(srv, name):
    return srv.store.peek(srv.store.rtype('kubevirt.io', 'virtualmachines'), NS, name)


def vmi_obj(srv, name):
    return srv.store.peek(srv.store.rtype('kubevirt.io', 'virtualmachineinstances'), NS, name)


def failed(result):
    assert result.get('failed'), result
    return result


def info(srv, **args):
    base = dict(backend='kubevirt', kubeconfig=srv.kubeconfig_path, namespace=NS)
    base.update(args)
    result = ok(run_module('vm_info', base))
    return dict((vm['name'], vm) for vm in result['vms'])


def test_every_state_and_transition_is_idempotent(kube_server):
    srv = kube_server
    name = 'life'
    created = ok(run_module('vm', small(srv, name, state='present')))
    assert created['changed'] and [s['action'] for s in created['steps']] == ['create']
    assert created['vm']['vm_state'] == 'STOPPED' and created['vm']['status'] == 'Stopped'
    assert vm_obj(srv, name)['spec']['runStrategy'] == 'Halted'
    assert vm_obj(srv, name)['metadata']['annotations']['converge.virt/vm-state'] == 'STOPPED'
    assert not ok(run_module('vm', small(srv, name, state='present')))['changed']

    # (state, expected actions, expected status, vm_state)
    sequence = [
        ('running', ['start'], 'Running', 'ACTIVE'),
        ('paused', ['pause'], 'Paused', 'PAUSED'),
        ('running', ['unpause'], 'Running', 'ACTIVE'),
        ('stopped', ['stop'], 'Stopped', 'STOPPED'),
        ('running', ['start'], 'Running', 'ACTIVE'),
        ('paused', ['pause'], 'Paused', 'PAUSED'),
        ('stopped', ['unpause', 'stop'], 'Stopped', 'STOPPED'),
    ]
    for state, actions, status, vm_state in sequence:
        result = ok(run_module('vm', small(srv, name, state=state)))
        assert result['changed'] and [s['action'] for s in result['steps']] == actions, (state, result['steps'])
        assert result['vm']['status'] == status and result['vm']['vm_state'] == vm_state, (state, result['vm'])
        # KubeVirt's controller writes printableStatus after the VMI changes (a real cluster lags the same way)
        srv.controller.wait_for(lambda: vm_obj(srv, name)['status'].get('printableStatus') == status, timeout=10)
        again = ok(run_module('vm', small(srv, name, state=state)))
        assert not again['changed'] and again['steps'] == [], (state, again['steps'])
        assert again['vm']['status'] == status
        assert vm_obj(srv, name)['metadata']['annotations']['converge.virt/vm-state'] == vm_state
        assert 'converge.virt/task-state' not in vm_obj(srv, name)['metadata']['annotations']
    removed = ok(run_module('vm', small(srv, name, state='absent')))
    assert removed['changed'] and [s['action'] for s in removed['steps']] == ['delete']
    assert vm_obj(srv, name) is None and vmi_obj(srv, name) is None
    assert not ok(run_module('vm', small(srv, name, state='absent')))['changed']


def test_restart_produces_a_new_instance(kube_server):
    srv = kube_server
    first = ok(run_module('vm', small(srv, 'rb', state='running')))
    assert [s['action'] for s in first['steps']] == ['create', 'start']
    old_uid = first['vm']['vmi_uid']
    assert old_uid and vmi_obj(srv, 'rb')['metadata']['uid'] == old_uid
    restarted = ok(run_module('vm', small(srv, 'rb', state='restarted')))
    assert restarted['changed'] and [s['action'] for s in restarted['steps']] == ['reboot_soft']
    assert restarted['vm']['vmi_uid'] not in (None, old_uid)
    assert restarted['vm']['status'] == 'Running' and vmi_obj(srv, 'rb')['metadata']['uid'] == restarted['vm']['vmi_uid']
    # a restart of a stopped VM starts it
    ok(run_module('vm', small(srv, 'rb', state='stopped')))
    again = ok(run_module('vm', small(srv, 'rb', state='restarted')))
    assert [s['action'] for s in again['steps']] == ['start'] and again['vm']['status'] == 'Running'


def test_check_mode_reports_the_plan_and_changes_nothing(kube_server):
    srv = kube_server
    planned = ok(run_module('vm', small(srv, 'cm', state='running'), check=True, diff=True))
    assert planned['changed'] and [s['action'] for s in planned['steps']] == ['create', 'start']
    assert vm_obj(srv, 'cm') is None
    ok(run_module('vm', small(srv, 'cm', state='running')))
    rv = vm_obj(srv, 'cm')['metadata']['resourceVersion']
    uid = vmi_obj(srv, 'cm')['metadata']['uid']
    for state, actions in (('stopped', ['stop']), ('paused', ['pause']), ('restarted', ['reboot_soft']), ('absent', ['delete'])):
        result = ok(run_module('vm', small(srv, 'cm', state=state), check=True))
        assert result['changed'] and [s['action'] for s in result['steps']] == actions, state
    changed_memory = ok(run_module('vm', small(srv, 'cm', state='running', memory='128Mi'), check=True))
    assert [s['action'] for s in changed_memory['steps']] == ['update']
    assert changed_memory['changes'][0]['path'] == 'spec.template.spec.domain.resources.requests.memory'
    srv.controller.settle()
    assert vm_obj(srv, 'cm')['spec']['template']['spec']['domain']['resources']['requests']['memory'] == '64Mi'
    assert vmi_obj(srv, 'cm')['metadata']['uid'] == uid and vmi_obj(srv, 'cm')['status']['phase'] == 'Running'
    assert 'converge.virt/task-state' not in vm_obj(srv, 'cm')['metadata']['annotations']
    del rv
    # check mode of a refused declaration fails the same way
    bad = failed(run_module('vm', small(srv, 'cm', state='suspended'), check=True))
    assert 'state' in bad['msg'] and 'kubevirt' in bad['msg']


def test_update_compares_only_declared_fields(kube_server):
    srv = kube_server
    args = small(srv, 'upd', state='present', spec={'template': {'spec': {'terminationGracePeriodSeconds': 30}}}, labels={'app': 'web'})
    ok(run_module('vm', args))
    # a webhook or another controller adds fields (defaults, extra disk, annotations): never a change
    store = srv.store
    store.mutate(store.rtype('kubevirt.io', 'virtualmachines'), NS, 'upd', lambda o: (
        o['spec']['template']['spec']['domain'].update(machine={'type': 'q35'}),
        o['spec']['template']['spec']['domain']['devices']['disks'][0].update(disk={'bus': 'virtio'}, bootOrder=1),
        o['metadata'].setdefault('labels', {}).update(extra='kept')))
    assert not ok(run_module('vm', args))['changed']
    assert not ok(run_module('vm', dict(args, memory='0.0625GiB')))['changed']    # same quantity, other unit
    bigger = ok(run_module('vm', dict(args, vcpus=2, memory='128Mi'), diff=True))
    assert bigger['changed'] and [s['action'] for s in bigger['steps']] == ['update']
    assert sorted(c['path'] for c in bigger['changes']) == ['spec.template.spec.domain.cpu.cores',
                                                            'spec.template.spec.domain.resources.requests.memory']
    vm = vm_obj(srv, 'upd')
    domain = vm['spec']['template']['spec']['domain']
    assert domain['cpu']['cores'] == 2 and domain['resources']['requests']['memory'] == '128Mi'
    assert domain['machine'] == {'type': 'q35'} and domain['devices']['disks'][0]['bootOrder'] == 1
    assert vm['metadata']['labels'] == {'app': 'web', 'extra': 'kept'}
    assert not ok(run_module('vm', dict(args, vcpus=2, memory='128Mi')))['changed']


def test_pending_restart_and_restart_on_change(kube_server):
    srv = kube_server
    ok(run_module('vm', small(srv, 'pr', state='running')))
    uid = vmi_obj(srv, 'pr')['metadata']['uid']
    changed = ok(run_module('vm', small(srv, 'pr', state='running', vcpus=2)))
    assert [s['action'] for s in changed['steps']] == ['update'] and changed['vm']['pending_restart'] is True
    assert vmi_obj(srv, 'pr')['metadata']['uid'] == uid
    applied = ok(run_module('vm', small(srv, 'pr', state='running', vcpus=2, restart_on_change=True)))
    assert [s['action'] for s in applied['steps']] == ['reboot_soft']
    assert applied['vm']['pending_restart'] is False and applied['vm']['vmi_uid'] != uid


@pytest.mark.parametrize('fault, words', [
    ('unschedulable', ('ErrorUnschedulable',)),
    ('image_pull', ('ErrImagePull', 'ImagePullBackOff')),
    ('guest_crash', ('CrashLoopBackOff',)),
])
def test_vm_faults_give_the_status_word(kube_server, fault, words):
    srv = kube_server
    srv.faults.inject(fault, NS, 'flt')
    result = failed(run_module('vm', small(srv, 'flt', state='running')))
    assert result['status'] in words and any(w in result['msg'] for w in words), result['msg']
    assert "'flt'" in result['msg'] or 'flt' in result['msg']
    # nothing lost, and the next run reports the same word (no new start attempted on top of KubeVirt's own)
    again = failed(run_module('vm', small(srv, 'flt', state='running')))
    assert not again.get('changed') and again['status'] in words
    assert vm_obj(srv, 'flt')['spec']['runStrategy'] == 'Always'
    seen = info(srv, name=['flt'])['flt']
    assert seen['status'] in words
    if seen['printable_status'] is not None and fault != 'image_pull':     # image pull alternates between its two words
        assert seen['printable_status'] == seen['status']
    # declaring stopped still works from the failing state
    stopped = ok(run_module('vm', small(srv, 'flt', state='stopped')))
    assert stopped['vm']['status'] == 'Stopped' and vm_obj(srv, 'flt')['spec']['runStrategy'] == 'Halted'


def test_missing_claim_is_error_pvc_not_found(kube_server):
    srv = kube_server
    args = kv(srv, name='nopvc', memory='64Mi', disks=[{'name': 'data', 'claim': 'does-not-exist'}], state='running')
    result = failed(run_module('vm', args))
    assert result['status'] == 'ErrorPvcNotFound' and 'ErrorPvcNotFound' in result['msg'] and 'does-not-exist' in result['msg']
    seen = info(srv, name=['nopvc'])['nopvc']
    assert seen['status'] == 'ErrorPvcNotFound'
    assert seen['printable_status'] == 'ErrorPvcNotFound'


def _dv_template(name):
    return {'metadata': {'name': name}, 'spec': {'source': {'http': {'url': 'http://images.example/fedora.qcow2'}},
                                                 'storage': {'resources': {'requests': {'storage': '1Gi'}}}}}


def test_datavolume_failure_is_datavolume_error(kube_server):
    srv = kube_server
    srv.faults.inject('dv_fail', NS, 'dvf-root')
    args = kv(srv, name='dvf', memory='64Mi', disks=[{'name': 'root', 'data_volume': 'dvf-root'}],
              data_volume_templates=[_dv_template('dvf-root')], state='running')
    result = failed(run_module('vm', args))
    assert result['status'] == 'DataVolumeError' and 'DataVolumeError' in result['msg']
    seen = info(srv, name=['dvf'])['dvf']
    assert seen['status'] == 'DataVolumeError' and seen['printable_status'] == 'DataVolumeError'


def test_delete_keeps_datavolumes_unless_asked(kube_server):
    srv = kube_server
    t_dv = srv.store.rtype(*CDI)
    for name, delete_volumes in (('keep', False), ('drop', True)):
        args = kv(srv, name=name, memory='64Mi', disks=[{'name': 'root', 'data_volume': name + '-root'}],
                  data_volume_templates=[_dv_template(name + '-root')], state='running')
        started = ok(run_module('vm', args))
        assert started['vm']['status'] == 'Running'
        ok(run_module('vm', dict(args, state='absent', delete_volumes=delete_volumes)))
        srv.controller.settle()
        assert vm_obj(srv, name) is None
        assert (srv.store.peek(t_dv, NS, name + '-root') is not None) is (not delete_volumes)


def test_a_real_409_refusal_is_an_error_naming_the_state(kube_server):
    srv = kube_server
    # a VM run once (runStrategy Once) that finished: virt-api refuses a manual start
    body = {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {'name': 'once', 'namespace': NS},
            'spec': {'runStrategy': 'Once', 'template': {'spec': {'domain': {'devices': {}, 'resources': {'requests': {'memory': '64Mi'}}}}}}}
    srv.store.create(srv.store.rtype('kubevirt.io', 'virtualmachines'), NS, body)
    srv.controller.wait_for(lambda: (vmi_obj(srv, 'once') or {}).get('status', {}).get('phase') == 'Running')
    srv.controller.shutdown(NS, 'once')
    srv.controller.settle()
    result = failed(run_module('vm', kv(srv, name='once', state='running')))
    assert 'start' in result['msg'] and 'refused' in result['msg'] and 'STOPPED' in result['msg'], result['msg']
    assert 'Once does not support manual start requests' in result['msg']
    assert result['vm_state'] == 'STOPPED'
    assert 'converge.virt/task-state' not in (vm_obj(srv, 'once')['metadata'].get('annotations') or {})
    # an injected 409 on the stop subresource of a running VM is an error too, never "unchanged"
    ok(run_module('vm', small(srv, 'c409', state='running')))
    srv.faults.conflict(r'/virtualmachines/c409/stop$', method='PUT', count=1)
    refused = failed(run_module('vm', small(srv, 'c409', state='stopped')))
    assert 'stop' in refused['msg'] and 'ACTIVE' in refused['msg'] and not refused['changed']
    assert vmi_obj(srv, 'c409')['status']['phase'] == 'Running'


def test_refused_transition_and_bad_input_change_nothing(kube_server):
    srv = kube_server
    ok(run_module('vm', small(srv, 'ref', state='present')))
    refused = failed(run_module('vm', small(srv, 'ref', state='paused')))
    assert 'STOPPED' in refused['msg'] and refused['vm_state'] == 'STOPPED'
    both = failed(run_module('vm', kv(srv, name='bad', memory='64Mi', disks=[{'image': 'x', 'claim': 'y'}])))
    assert both['msg'].startswith('disks[0]')
    libvirt_opt = failed(run_module('vm', kv(srv, name='bad', memory='64Mi', graphics='vnc')))
    assert libvirt_opt['msg'].startswith('graphics')
    power_in_spec = failed(run_module('vm', kv(srv, name='bad', memory='64Mi', spec={'runStrategy': 'Always'})))
    assert power_in_spec['msg'].startswith('spec.runStrategy')
    no_memory = failed(run_module('vm', kv(srv, name='bad')))
    assert no_memory['msg'].startswith('memory')
    fleet_bad = failed(run_module('vm', kv(srv, vms=[{'name': 'f1', 'memory': '64Mi'}, {'name': 'f2', 'memory': 'lots'}])))
    assert fleet_bad['msg'].startswith('vms[1].memory')
    assert vm_obj(srv, 'bad') is None and vm_obj(srv, 'f1') is None


def test_fleet_form(kube_server):
    srv = kube_server
    vms = [dict(name='fl-%d' % i, vcpus=1, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/x'}],
                state='running' if i % 2 else 'present') for i in range(6)]
    first = ok(run_module('vm', kv(srv, vms=vms, parallel=4)))
    assert first['changed'] and len(first['results']) == 6 and not any(r['failed'] for r in first['results'])
    by_name = dict((r['name'], r) for r in first['results'])
    assert by_name['fl-1']['vm']['status'] == 'Running' and by_name['fl-0']['vm']['status'] == 'Stopped'
    second = ok(run_module('vm', kv(srv, vms=vms, parallel=4)))
    assert not second['changed'] and all(r['steps'] == [] for r in second['results'])
    check = ok(run_module('vm', kv(srv, vms=[dict(v, state='stopped') for v in vms]), check=True))
    assert sorted(r['name'] for r in check['results'] if r['changed']) == ['fl-1', 'fl-3', 'fl-5']
    assert vmi_obj(srv, 'fl-1')['status']['phase'] == 'Running'
    srv.faults.inject('unschedulable', NS, 'fl-6')
    mixed = failed(run_module('vm', kv(srv, vms=vms + [dict(vms[1], name='fl-6')])))
    failures = [r for r in mixed['results'] if r['failed']]
    assert [r['name'] for r in failures] == ['fl-6'] and failures[0]['status'] == 'ErrorUnschedulable'


def test_vm_info_reports_the_same_words(kube_server):
    srv = kube_server
    ok(run_module('vm', small(srv, 'i-run', state='running')))
    ok(run_module('vm', small(srv, 'i-stop', state='present')))
    ok(run_module('vm', small(srv, 'i-pause', state='running')))
    paused = ok(run_module('vm', small(srv, 'i-pause', state='paused')))
    srv.controller.settle()
    vms = info(srv)
    assert sorted(vms) == ['i-pause', 'i-run', 'i-stop']
    expected = {'i-run': ('Running', 'ACTIVE', 'RUNNING'), 'i-stop': ('Stopped', 'STOPPED', 'SHUTDOWN'), 'i-pause': ('Paused', 'PAUSED', 'PAUSED')}
    for name, (status, vm_state, power) in expected.items():
        assert (vms[name]['status'], vms[name]['vm_state'], vms[name]['power_state']) == (status, vm_state, power)
        assert vms[name]['printable_status'] == vms[name]['status']
    assert vms['i-pause']['status'] == paused['vm']['status']
    only = info(srv, name=['i-run', 'ghost'])
    assert only['ghost']['exists'] is False and only['i-run']['exists'] is True
    running = info(srv, status=['Running'])
    assert sorted(running) == ['i-run']
    # the guest shuts itself down: run strategy Always makes KubeVirt start a new instance, the words follow
    old_uid = vms['i-run']['vmi_uid']
    srv.controller.shutdown(NS, 'i-run')
    srv.controller.settle()
    seen = info(srv, name=['i-run'])['i-run']
    assert (seen['status'], seen['vm_state'], seen['printable_status']) == ('Running', 'ACTIVE', 'Running')
    assert seen['vmi_uid'] not in (None, old_uid)
    # with the record STOPPED a guest that shuts itself down stays Stopped and so does every word
    ok(run_module('vm', small(srv, 'i-pause', state='stopped')))
    assert info(srv, name=['i-pause'])['i-pause']['status'] == 'Stopped'


def test_token_never_in_results(kube_server, tmp_path, monkeypatch):
    srv = kube_server
    canary = 'canary-token-5f3e9a1c7b'
    canary = srv.add_token(canary, ['*'])
    ca = tmp_path / 'ca.pem'
    ca.write_bytes(srv.ca_pem)
    args = dict(backend='kubevirt', host=srv.url, api_key=canary, ca_cert=str(ca), namespace=NS, name='tok', memory='64Mi',
                disks=[{'name': 'root', 'image': 'quay.io/x'}], state='running', wait_timeout=60)
    results = [ok(run_module('vm', args, diff=True)), ok(run_module('vm_info', dict((k, args[k]) for k in ('backend', 'host', 'api_key',
                                                                                                           'ca_cert', 'namespace'))))]
    results.append(failed(run_module('vm', dict(args, state='suspended'))))
    # a failing call (no such namespace permission, refused pause on a stopped VM, unreachable server)
    results.append(failed(run_module('vm', dict(args, name='tok2', state='paused'))))
    results.append(failed(run_module('vm', dict(args, host='https://127.0.0.1:1', name='x'))))
    wrong = 'canary-wrong-77d2c0e4'
    results.append(failed(run_module('vm', dict(args, api_key=wrong))))
    assert '401' in results[-1]['msg'] or 'Unauthorized' in results[-1]['msg']
    # the environment fallbacks: K8S_AUTH_HOST / K8S_AUTH_API_KEY / K8S_AUTH_SSL_CA_CERT
    monkeypatch.setenv('K8S_AUTH_HOST', srv.url)
    monkeypatch.setenv('K8S_AUTH_API_KEY', canary)
    monkeypatch.setenv('K8S_AUTH_SSL_CA_CERT', str(ca))
    from_env = ok(run_module('vm_info', dict(backend='kubevirt', namespace=NS)))
    assert [vm['name'] for vm in from_env['vms']] == ['tok']
    results.append(from_env)
    monkeypatch.setenv('K8S_AUTH_API_KEY', wrong)
    results.append(failed(run_module('vm_info', dict(backend='kubevirt', namespace=NS))))
    for result in results:
        text = json.dumps(result)
        assert canary not in text and wrong not in text, text[:2000]
    assert os.path.exists(str(ca))


def test_wait_for_address_reports_the_instance_address_and_port_is_refused(kube_server):
    srv = kube_server
    result = ok(run_module('vm', small(srv, 'ready-1', state='running', wait_for='address')))
    vmi = vmi_obj(srv, 'ready-1')
    # the guest agent answers (AgentConnected) and the instance reports the address of its first interface
    assert [c['status'] for c in vmi['status']['conditions'] if c['type'] == 'AgentConnected'] == ['True']
    assert result['vm']['readiness'] == 'address' and result['vm']['address'] == vmi['status']['interfaces'][0]['ipAddress'], result['vm']
    fleet = ok(run_module('vm', kv(srv, vms=[dict(name='ready-2', vcpus=1, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/x'}],
                                                  state='running')], wait_for='agent')))
    assert fleet['results'][0]['readiness'] == 'address' and fleet['results'][0]['address'], fleet['results']
    before = vm_obj(srv, 'ready-1')['metadata']['resourceVersion']
    refused = failed(run_module('vm', small(srv, 'ready-1', state='running', wait_for='port')))
    assert refused['field'] == 'wait_for' and 'not available on backend kubevirt' in refused['msg'], refused
    assert vm_obj(srv, 'ready-1')['metadata']['resourceVersion'] == before
