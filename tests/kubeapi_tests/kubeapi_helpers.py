"""Shared helpers for the kubeapi tests (no collection imports)."""

# pylint: disable=too-many-arguments,too-many-positional-arguments,consider-using-f-string

import json
import time

SUB = '/apis/subresources.kubevirt.io/v1/namespaces/%s/%s/%s/%s'


def vm_body(name, run_strategy='Always', volumes=None, disks=None, running=None, **spec_extra):
    """A minimal VirtualMachine manifest."""
    spec = {'template': {'metadata': {'labels': {'kubevirt.io/vm': name}},
                         'spec': {'domain': {'devices': {'disks': disks or []}, 'resources': {'requests': {'memory': '64Mi'}}},
                                  'volumes': volumes or []}}}
    if running is not None:
        spec['running'] = running
    elif run_strategy is not None:
        spec['runStrategy'] = run_strategy
    spec.update(spec_extra)
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {'name': name}, 'spec': spec}


def pvc_body(name, size='1Gi', storage_class=None, modes=('ReadWriteOnce',)):
    """A PVC manifest."""
    spec = {'accessModes': list(modes), 'resources': {'requests': {'storage': size}}}
    if storage_class:
        spec['storageClassName'] = storage_class
    return {'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim', 'metadata': {'name': name}, 'spec': spec}


def status_of(exc):
    """Decode the Status body of an ApiException / DynamicApiError."""
    return json.loads(exc.body)


def sub(dyn, kind, name, action, body=None, ns='default'):
    """PUT a virt-api subresource through the dynamic client; returns the HTTP status (errors raise DynamicApiError)."""
    plural = 'virtualmachines' if kind == 'vm' else 'virtualmachineinstances'
    resp = dyn.request('PUT', SUB % (ns, plural, name, action), body=body or {}, serialize=False)
    return resp.status


def wait_until(pred, timeout=10.0, interval=0.01):
    """Poll until pred() is truthy."""
    end = time.time() + timeout
    while time.time() < end:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError('condition not reached in %.1fs' % timeout)
