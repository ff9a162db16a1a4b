"""volume (kubevirt): clone_from_datasource - a DataVolume with CDI's sourceRef to a DataSource (issue 18, golden images)."""

import pytest

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common import volume_run
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_observe, volume_plan, volume_spec
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import CDI_API, CORE_API, KUBEVIRT_API, KubeClient
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase


@pytest.mark.parametrize('decl, field, words', [
    ({'name': 'a', 'clone_from_datasource': 'Bad/Name'}, 'clone_from_datasource', 'DataSource name or namespace/name'),
    ({'name': 'a', 'clone_from_datasource': 'a/b/c'}, 'clone_from_datasource', 'DataSource name or namespace/name'),
    ({'name': 'a', 'clone_from_datasource': 'fedora', 'clone_from': 'golden'}, 'clone_from_datasource', 'clone_from is set too'),
    ({'name': 'a', 'clone_from_datasource': 'fedora', 'import_from': 'https://h/i'}, 'clone_from_datasource', 'import_from is set too'),
    ({'name': 'a', 'clone_from_datasource': 'fedora', 'data_volume': False}, 'data_volume', 'need a DataVolume'),
])
def test_bad_datasource_declarations_name_the_field(decl, field, words):
    with pytest.raises(InvalidDeclaration) as err:
        volume_spec.normalize_volume(decl, 'volumes[1].')
    assert err.value.field == 'volumes[1].' + field and words in str(err.value)


def test_the_manifest_carries_a_source_ref_and_no_source():
    spec = volume_spec.normalize_volume({'name': 'web-root', 'clone_from_datasource': 'os-images/fedora-40'})
    assert spec['kind'] == 'DataVolume' and spec['source'] is None
    assert volume_spec.check_create(spec) is None, 'a clone takes the size of its source'
    body = volume_spec.datavolume_manifest(spec, 'vms')
    assert body['spec'] == {'sourceRef': {'kind': 'DataSource', 'name': 'fedora-40', 'namespace': 'os-images'}, 'storage': {}}
    local = volume_spec.datavolume_manifest(volume_spec.normalize_volume({'name': 'b', 'clone_from_datasource': 'fedora', 'capacity': '20Gi'}), 'vms')
    assert local['spec'] == {'sourceRef': {'kind': 'DataSource', 'name': 'fedora', 'namespace': 'vms'},
                             'storage': {'resources': {'requests': {'storage': '20Gi'}}}}
    # a fleet default: every item clones the same golden DataSource
    item = volume_spec.normalize_volume({'name': 'c'}, defaults={'clone_from_datasource': 'fedora'})
    assert item['source_ref'] == {'kind': 'DataSource', 'name': 'fedora'}


class DataSourceClient:
    """Lists and GETs from dicts (only the DataSources given exist); records every request and every DataSource asked for."""

    path = staticmethod(KubeClient.path)

    def __init__(self, datasources=(), pvcs=()):
        self.objects = {(CORE_API, 'persistentvolumeclaims'): dict((name, pvc(name)) for name in pvcs), (CDI_API, 'datavolumes'): {},
                        (KUBEVIRT_API, 'virtualmachines'): {}, (KUBEVIRT_API, 'virtualmachineinstances'): {},
                        (CDI_API, 'datasources'): dict((name, {'metadata': {'name': name}}) for name in datasources)}
        self.asked = []
        self.requests = []

    def list(self, api, namespace, plural):
        del namespace
        return list(self.objects[(api, plural)].values())

    def get(self, api, namespace, plural, name):
        if plural == 'datasources':
            self.asked.append((namespace, name))
        return self.objects[(api, plural)].get(name)

    def request(self, method, path, body=None, query=None, content_type=None, what=None):
        del what
        self.requests.append((method, path, body, query, content_type))
        return {}


def pvc(name):
    return {'metadata': {'name': name, 'annotations': {}}, 'spec': {'resources': {'requests': {'storage': '1Gi'}}},
            'status': {'phase': 'Bound', 'capacity': {'storage': '1Gi'}}}


def test_a_missing_datasource_is_refused_before_anything_is_created():
    client = DataSourceClient(datasources=['fedora'], pvcs=['golden'])
    world = volume_observe.NamespaceVolumes(client, 'ns')
    _plan, refusals, ops = volume_plan.plan([volume_spec.normalize_volume({'name': 'a', 'clone_from_datasource': 'nope'})], world)
    assert not ops and refusals == [{'volume': 'a', 'field': 'clone_from_datasource',
                                     'reason': 'clone_from_datasource: DataSource nope does not exist in namespace ns'}]
    _plan, refusals, ops = volume_plan.plan([volume_spec.normalize_volume({'name': 'a', 'clone_from_datasource': 'fedora'})], world)
    assert not refusals and [o.kind for o in ops] == [phase.CREATE]
    assert client.asked == [('ns', 'nope'), ('ns', 'fedora')]
    assert not client.requests, 'planning writes nothing'


def test_the_option_is_kubevirt_only_and_in_the_argument_spec():
    spec = volume_run.argument_spec(_providers.argument_spec(), _providers.PROVIDERS)
    assert spec['clone_from_datasource'] == {'type': 'str'} and spec['volumes']['options']['clone_from_datasource'] == {'type': 'str'}
    group = _providers.PROVIDERS['kubevirt'].options['volume']
    assert group.given({'volumes': [{'name': 'a', 'clone_from_datasource': 'x'}]}) == 'volumes[0].clone_from_datasource'
