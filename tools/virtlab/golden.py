"""A small golden disk image for the login guest: an ISO9660 file system (pycdlib, pure Python) the guest mounts.

The login guest (:mod:`tools.virtlab.loginguest`) boots from a kernel and an initramfs, so its golden image is a
data disk: every VM of the golden-image journey gets a qcow2 overlay on (or a full copy of) one volume imported from
this image, attached as ``vdb``; the guest mounts it read-only (``mount -t iso9660 /dev/vdb``, the guest loads
``isofs`` and ``virtio_blk``) and reads :data:`RELEASE_PATH`. The guest's own writes go to its overlay (past the
file system, in the space the overlay was grown by), never to the golden volume, whose checksum the tests compare
before and after.

``python -m tools.virtlab.golden image OUT`` writes the image and prints ``{"path", "size", "sha256", "release"}``;
``python -m tools.virtlab.golden network start|stop --uri URI`` defines and starts (or stops and removes) an isolated
libvirt network (no forward: dnsmasq hands out addresses of a subnet that exists only inside the caller's own network
namespace; refused outside one) for the guests of the journey (playbooks/demo_golden.yml).
"""

import argparse
import hashlib
import io
import json
import os
import sys
import xml.etree.ElementTree as ET

import pycdlib

from . import netns

VOLUME_LABEL = 'CONVERGE_GOLDEN'
RELEASE_PATH = 'release.txt'
RELEASE = 'converge-golden 1\n'


def build_golden_image(path, release=RELEASE):
    """Write the golden ISO to ``path`` (replaced atomically); return ``{path, size, sha256, release}``."""
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, rock_ridge='1.09', joliet=3, vol_ident=VOLUME_LABEL)
    data = release.encode()
    iso.add_fp(io.BytesIO(data), len(data), '/RELEASE.TXT;1', rr_name=RELEASE_PATH, joliet_path='/' + RELEASE_PATH)
    out = io.BytesIO()
    iso.write_fp(out)
    iso.close()
    image = out.getvalue()
    tmp = path + '.tmp'
    with open(tmp, 'wb') as handle:
        handle.write(image)
    os.replace(tmp, path)
    return {'path': path, 'size': len(image), 'sha256': hashlib.sha256(image).hexdigest(), 'release': release}


NETWORK = 'cvgolden'
BRIDGE = 'cvgolden0'
GATEWAY = '192.168.232.1'


def network_xml(name=NETWORK, bridge=BRIDGE, gateway=GATEWAY):
    """An isolated libvirt network (no <forward>) with DHCP on the /24 of ``gateway``."""
    prefix = gateway.rsplit('.', 1)[0]
    net = ET.Element('network')
    ET.SubElement(net, 'name').text = name
    ET.SubElement(net, 'bridge', name=bridge)
    ip = ET.SubElement(net, 'ip', address=gateway, netmask='255.255.255.0')
    ET.SubElement(ET.SubElement(ip, 'dhcp'), 'range', start=prefix + '.10', end=prefix + '.99')
    return ET.tostring(net, encoding='unicode')


def network(action, uri, name=NETWORK, bridge=BRIDGE, gateway=GATEWAY):
    """Start (define + create, nothing when it runs) or stop (destroy + undefine) the network; returns what was done."""
    import libvirt  # pylint: disable=import-outside-toplevel
    conn = libvirt.open(uri)
    try:
        try:
            net = conn.networkLookupByName(name)
        except libvirt.libvirtError:
            net = None
        if action == 'start':
            if not netns.wait_private():
                raise SystemExit('golden network: start only inside a private network namespace (python -m tools.virtlab netns -- ...)')
            if net is None:
                net = conn.networkDefineXML(network_xml(name, bridge, gateway))
            if net.isActive():
                return {'network': name, 'changed': False}
            net.create()
            return {'network': name, 'changed': True}
        if net is None:
            return {'network': name, 'changed': False}
        if net.isActive():
            net.destroy()
        net.undefine()
        return {'network': name, 'changed': True}
    finally:
        conn.close()


def main(argv=None):
    """CLI: ``image OUT`` or ``network start|stop --uri URI`` (prints JSON)."""
    parser = argparse.ArgumentParser(prog='python -m tools.virtlab.golden')
    sub = parser.add_subparsers(dest='what', required=True)
    image = sub.add_parser('image', help='write the golden ISO9660 image')
    image.add_argument('out')
    net = sub.add_parser('network', help='the isolated libvirt network of the journey')
    net.add_argument('action', choices=['start', 'stop'])
    net.add_argument('--uri', required=True)
    net.add_argument('--name', default=NETWORK)
    net.add_argument('--bridge', default=BRIDGE)
    net.add_argument('--gateway', default=GATEWAY)
    args = parser.parse_args(argv)
    if args.what == 'image':
        print(json.dumps(build_golden_image(os.path.abspath(args.out))))
    else:
        print(json.dumps(network(args.action, args.uri, args.name, args.bridge, args.gateway)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
