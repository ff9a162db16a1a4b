"""A small golden disk image for the login guest: an ISO9660 file system (pycdlib, pure Python) the guest mounts.

The login guest (:mod:`tools.virtlab.loginguest`) boots from a kernel and an initramfs, so its golden image is a
data disk: every VM of the golden-image journey gets a qcow2 overlay on (or a full copy of) one volume imported from
this image, attached as ``vdb``; the guest mounts it read-only (``mount -t iso9660 /dev/vdb``, the guest loads
``isofs`` and ``virtio_blk``) and reads :data:`RELEASE_PATH`. The guest's own writes go to its overlay (past the
file system, in the space the overlay was grown by), never to the golden volume, whose checksum the tests compare
before and after.

``python -m tools.virtlab.golden OUT`` writes the image and prints ``{"path", "size", "sha256", "release"}``.
"""

import hashlib
import io
import json
import os
import sys

import pycdlib

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


def main(argv=None):
    """CLI: write the image to the path given, print what was written (JSON)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print('usage: python -m tools.virtlab.golden OUT.iso', file=sys.stderr)
        return 2
    print(json.dumps(build_golden_image(os.path.abspath(args[0]))))
    return 0


if __name__ == '__main__':
    sys.exit(main())
