"""A KubeVirt migration's placement checks (migration_pin): the instance's own nodeSelector / required node affinity
against target_node (the scheduler's rules for those fields), the refusal's words, and the target pod's Unschedulable
condition read by the migration's uid label."""

# pylint: disable=missing-function-docstring

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import api_errors, migration_options, migration_pin
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend as kmb
from ansible_collections.converge.virt.plugins.module_utils._phase import migration

HOST = 'kubernetes.io/hostname'


def node(name, **labels):
    return {'metadata': {'name': name, 'labels': dict({HOST: name}, **labels)}}


def vmi(selector=None, terms=None):
    spec = {}
    if selector is not None:
        spec['nodeSelector'] = selector
    if terms is not None:
        spec['affinity'] = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': terms}}}
    return {'metadata': {'name': 'vm'}, 'spec': spec, 'status': {'nodeName': 'node1'}}


def expr(key, operator, *values):
    out = {'key': key, 'operator': operator}
    if values:
        out['values'] = list(values)
    return out


def test_a_hostname_pin_excludes_every_other_node():
    pinned = vmi({HOST: 'node1'})
    assert migration_pin.placement_excluding(pinned, node('node2')) == 'nodeSelector kubernetes.io/hostname=node1'
    assert migration_pin.placement_excluding(pinned, node('node1')) is None


def test_a_selector_on_other_labels_only_excludes_nodes_without_them():
    gpu = vmi({'gpu': 'yes'})
    assert migration_pin.placement_excluding(gpu, node('node2', gpu='yes')) is None
    assert migration_pin.placement_excluding(gpu, node('node2', gpu='no')) == 'nodeSelector gpu=yes'
    assert migration_pin.placement_excluding(gpu, node('node2')) == 'nodeSelector gpu=yes'
    assert migration_pin.placement_excluding(vmi(), node('node2')) is None
    assert migration_pin.placement_excluding(vmi({}), node('node2')) is None


@pytest.mark.parametrize('terms, fits', [
    ([{'matchExpressions': [expr(HOST, 'In', 'node1')]}], False),
    ([{'matchExpressions': [expr(HOST, 'In', 'node1', 'node2')]}], True),
    ([{'matchExpressions': [expr(HOST, 'NotIn', 'node2')]}], False),
    ([{'matchExpressions': [expr(HOST, 'NotIn', 'node1')]}], True),
    ([{'matchExpressions': [expr('rack', 'Exists')]}], True),
    ([{'matchExpressions': [expr('zone', 'Exists')]}], False),
    ([{'matchExpressions': [expr('zone', 'DoesNotExist')]}], True),
    ([{'matchExpressions': [expr('rack', 'DoesNotExist')]}], False),
    ([{'matchExpressions': [expr('cores', 'Gt', '8')]}], True),
    ([{'matchExpressions': [expr('cores', 'Gt', '16')]}], False),
    ([{'matchExpressions': [expr('cores', 'Lt', '8')]}], False),
    ([{'matchExpressions': [expr('rack', 'Gt', '1')]}], False),             # not a number: no match (the scheduler's rule)
    # the expressions of a term are ANDed, the terms ORed
    ([{'matchExpressions': [expr('rack', 'Exists'), expr(HOST, 'In', 'node1')]}], False),
    ([{'matchExpressions': [expr(HOST, 'In', 'node1')]}, {'matchExpressions': [expr('rack', 'In', 'r2')]}], True),
    ([{'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': ['node1']}]}], False),
    ([{'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': ['node2']}]}], True),
    ([{}], False),                                                          # an empty term selects no node
    ([], False),
])
def test_required_node_affinity_is_evaluated_as_the_scheduler_does(terms, fits):
    target = node('node2', rack='r2', cores='12')
    found = migration_pin.placement_excluding(vmi(terms=terms), target)
    if fits:
        assert found is None, found
    else:
        assert found is not None and found.startswith('required node affinity '), found


def test_an_operator_it_does_not_know_is_left_to_the_scheduler():
    odd = vmi(terms=[{'matchExpressions': [expr(HOST, 'Near', 'node2')]}])
    assert migration_pin.placement_excluding(odd, node('node2')) is None
    # but a known requirement that fails in the same term still excludes
    odd = vmi(terms=[{'matchExpressions': [expr(HOST, 'Near', 'node2'), expr(HOST, 'In', 'node1')]}])
    assert migration_pin.placement_excluding(odd, node('node2')) is not None


def test_the_refusal_names_target_node_the_pin_and_the_current_node():
    with pytest.raises(InvalidDeclaration) as caught:
        migration_pin.check_placement(vmi({HOST: 'node1'}), node('node2'), 'node2', 'node1')
    text = str(caught.value)
    assert caught.value.field == 'target_node' and text.startswith('target_node: node node2 is excluded'), text
    assert 'nodeSelector kubernetes.io/hostname=node1' in text and 'runs on node node1' in text and 'no migration was created' in text
    migration_pin.check_placement(vmi({HOST: 'node1'}), node('node1'), 'node1', 'node1')     # fits: no error
    long_terms = [{'matchExpressions': [expr(HOST, 'In', *['n%03d' % i for i in range(200)])]}]
    with pytest.raises(InvalidDeclaration) as caught:
        migration_pin.check_placement(vmi(terms=long_terms), node('node2'), 'node2', 'node1')
    assert len(str(caught.value)) < 800 and '...' in str(caught.value)


class Pods:
    """A client whose list answers the given pods (recording the label selector)."""

    def __init__(self, pods):
        self.pods = pods
        self.asked = []

    def list(self, api, namespace, plural, label_selector=None):
        self.asked.append((api, namespace, plural, label_selector))
        return self.pods


def pod(phase='Pending', scheduled=None, deleting=False):
    obj = {'metadata': {'name': 'virt-launcher-vm-abcde'}, 'status': {'phase': phase, 'conditions': []}}
    if scheduled is not None:
        obj['status']['conditions'].append(dict({'type': 'PodScheduled'}, **scheduled))
    if deleting:
        obj['metadata']['deletionTimestamp'] = '2026-11-29T00:00:00Z'
    return obj


UNSCHEDULABLE = {'status': 'False', 'reason': 'Unschedulable',
                 'message': "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."}


def test_an_unschedulable_target_pod_is_reported_with_the_schedulers_message():
    client = Pods([pod(scheduled=UNSCHEDULABLE)])
    assert migration_pin.unschedulable_target(client, 'demo', 'uid-1') == ('virt-launcher-vm-abcde', UNSCHEDULABLE['message'])
    assert client.asked == [('/api/v1', 'demo', 'pods', 'kubevirt.io/migrationJobUID=uid-1')]


@pytest.mark.parametrize('target', [
    pod(),                                                                  # not looked at by the scheduler yet
    pod(scheduled={'status': 'True'}),
    pod(phase='Running', scheduled=UNSCHEDULABLE),                          # an old condition on a running pod
    pod(scheduled=UNSCHEDULABLE, deleting=True),                            # KubeVirt deleting it (its own timeout)
    pod(scheduled={'status': 'False', 'reason': 'SchedulingGated'}),
])
def test_anything_else_is_not_unschedulable(target):
    assert migration_pin.unschedulable_target(Pods([target]), 'demo', 'uid-1') is None
    assert migration_pin.unschedulable_target(Pods([]), 'demo', 'uid-1') is None


def test_a_long_scheduler_message_is_cut():
    long = dict(UNSCHEDULABLE, message='x' * 2000)
    _name, message = migration_pin.unschedulable_target(Pods([pod(scheduled=long)]), 'demo', 'uid-1')
    assert len(message) == migration_pin.SHOWN + 3 and message.endswith('...')


# -- the run: the placement checked before anything is created, an unschedulable target failed and aborted at once ----

class Cluster:
    """What a KubeVirt migration run reads and writes: a node, the VMIM, the VMI, the target pods (``forbid``: the token
    may not list pods)."""

    def __init__(self, vmim_phase='Scheduling', pods=(), forbid=False):
        self.node = node('node2')
        self.vmim = {'metadata': {'name': 'a-converge-x', 'uid': 'u1'}, 'spec': {'vmiName': 'a'}, 'status': {'phase': vmim_phase}}
        self.vmi_obj = dict(vmi({HOST: 'node1'}), status={'phase': 'Running', 'nodeName': 'node1'})
        self.pods = list(pods)
        self.forbid = forbid
        self.lists = 0
        self.deleted = []

    def request(self, method, path, body=None, query=None, content_type=None, what=None):  # pylint: disable=unused-argument,too-many-arguments
        assert method == 'GET' and path == '/api/v1/nodes/node2', (method, path)
        return self.node

    def get(self, api, namespace, plural, name, what=None):  # pylint: disable=unused-argument,too-many-arguments
        return {'virtualmachineinstancemigrations': self.vmim, 'virtualmachineinstances': self.vmi_obj}[plural]

    def list(self, api, namespace, plural, label_selector=None):
        assert (api, namespace, plural, label_selector) == ('/api/v1', 'ns', 'pods', 'kubevirt.io/migrationJobUID=u1')
        self.lists += 1
        if self.forbid:
            raise api_errors.Forbidden('pods is forbidden: alice cannot list pods in ns', code=403)
        return self.pods

    def delete(self, api, namespace, plural, name):
        self.deleted.append((plural, name))
        self.vmim = dict(self.vmim, metadata=dict(self.vmim['metadata'], deletionTimestamp='2026-11-29T00:00:00Z'))

    @staticmethod
    def redact(text):
        return text


def _run(cluster, **opts):
    run = kmb.KubevirtMigration(cluster, 'ns', 'a', migration_options.KubevirtMigrationOptions(**opts))
    run.vmim_name = 'a-converge-x'
    return run, kmb._FollowKubevirt(run, 'u1', None, False)  # pylint: disable=protected-access


def test_the_run_refuses_a_target_the_pin_excludes_before_anything_is_created():
    cluster = Cluster()
    run, _hooks = _run(cluster, target_node='node2')
    with pytest.raises(InvalidDeclaration) as caught:
        run._check_target(cluster.vmi_obj)  # pylint: disable=protected-access
    assert 'nodeSelector kubernetes.io/hostname=node1' in str(caught.value) and 'runs on node node1' in str(caught.value)
    cluster.vmi_obj['spec'] = {}        # not pinned: the node is checked for cordon/taints only
    cluster.node['spec'], cluster.node['status'] = {}, {'conditions': [{'type': 'Ready', 'status': 'True'}]}
    assert run._check_target(cluster.vmi_obj) is None  # pylint: disable=protected-access


def test_an_unschedulable_target_fails_the_run_at_once_and_aborts_the_migration():
    cluster = Cluster(pods=[pod(scheduled=UNSCHEDULABLE)])
    run, hooks = _run(cluster)
    look = hooks.look()
    assert run.phase == migration.FAILED and run.reason == migration.UNSCHEDULABLE_TIMEOUT, (run.phase, run.reason)
    assert cluster.deleted == [('virtualmachineinstancemigrations', 'a-converge-x')]
    assert hooks.unschedulable == 'the target pod virt-launcher-vm-abcde is Unschedulable: ' + UNSCHEDULABLE['message']
    assert not look.over, 'over only once KubeVirt ends it too'
    cluster.vmim = dict(cluster.vmim, status={'phase': 'Failed'})
    assert hooks.look().over and cluster.deleted == [('virtualmachineinstancemigrations', 'a-converge-x')]


def test_a_schedulable_target_is_waited_for_and_the_pod_read_at_most_every_interval():
    cluster = Cluster(pods=[pod(scheduled={'status': 'True'})])
    run, hooks = _run(cluster)
    for _look in range(5):
        hooks.look()
    assert run.phase == migration.SCHEDULING and cluster.deleted == [] and cluster.lists == 1


def test_with_pending_timeout_kubevirt_decides_how_long_an_unschedulable_target_waits():
    cluster = Cluster(pods=[pod(scheduled=UNSCHEDULABLE)])
    run, hooks = _run(cluster, pending_timeout=120)
    hooks.look()
    assert run.phase == migration.SCHEDULING and cluster.lists == 0 and cluster.deleted == []


def test_a_token_that_may_not_list_pods_is_noted_once_and_the_run_waits():
    cluster = Cluster(pods=[pod(scheduled=UNSCHEDULABLE)], forbid=True)
    run, hooks = _run(cluster)
    hooks.look()
    hooks.pod_read_at = None
    hooks.look()
    assert run.phase == migration.SCHEDULING and cluster.lists == 1 and cluster.deleted == []
    assert len(run.notes) == 1 and 'cannot be read' in run.notes[0] and 'forbidden' in run.notes[0]
