"""Secrets canary, the KubeVirt half: the playbook of test_secrets_canary.py limited to its KubeVirt tasks (tokens, wrong
tokens, cloud-init user data, DataVolume import URLs, the roles on kubevirt), the runs that stand alone (the three inventory
files with ansible-inventory, playbooks/report.yml, the control on ansible-core 2.19) and the same scan of everything the runs
wrote.

A file of its own so that pytest-xdist (``--dist loadfile``) runs it on one worker while the libvirt half runs on the other.
"""

# pylint: disable=redefined-outer-name,unused-import

from tests.reliability.test_secrets_canary import check_canaries, lab  # noqa: F401 (the fixture)


def test_canaries_never_appear_kubevirt(lab):
    check_canaries(lab, 'kv')
