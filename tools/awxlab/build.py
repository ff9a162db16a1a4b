"""Build what an AWX-style run needs, into a cache outside the checkout (``$CONVERGE_VIRT_AWX_CACHE`` or
``~/.cache/converge-virt/awx``).

Parts, each in ``<cache>/<part>-<hash>/`` (the hash covers the part's inputs; a part is built in a temporary directory
and renamed into place only when complete, so an unchanged part is never rebuilt):

``receptor``   receptor v1.4.4 (Go module github.com/ansible/receptor, the one version the Go module proxy serves):
               ``go mod download`` then ``go build ./cmd/receptor-cl`` inside a writable copy of the module
               (``go install`` refuses it: the version is on the module's retract list).
``venv``       a virtualenv with receptorctl, ansible-runner and ansible-builder from PyPI (the lab's own: the project's
               .venv and test-requirements.txt are untouched).
``wheelhouse`` the EE's Python packages, prepared on the host (``pip wheel``: libvirt-python is built here against
               this Debian bookworm machine's libvirt, the rest downloaded), so the EE build needs no network.
``base``       a Debian bookworm root file system made by mmdebstrap from Debian's own packages (python3, python3-pip,
               libvirt0, openssh-client, ...) and imported as the local image ``localhost/converge-virt-awx-base``.
``ee``         the collection's execution environment, built by ansible-builder v3 on that base from an EE definition
               that lists the collection (its meta/execution-environment.yml gives requirements.txt and bindep.txt),
               pip reading only the wheelhouse; tagged ``localhost/converge-virt-ee:<hash>``. ``<part dir>/image.json``
               records the tag, its size and the build's seconds.
``debase``, ``dewheelhouse``, ``de``   the decision environment (what ansible-rulebook runs the collection's event
               sources in): the base with Debian's default-jre-headless, the wheelhouse with ansible-rulebook, and the
               image ansible-builder makes of them, tagged ``localhost/converge-virt-de:<hash>``.

Subprocesses get argument lists (no shell); heavy steps run under ``nice -n 10``.  Standard library only.
"""

import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

RECEPTOR_MODULE = 'github.com/ansible/receptor'
RECEPTOR_VERSION = 'v1.4.4'
# the lab's own virtualenv (pinned: the cache key is this list)
VENV_REQUIREMENTS = ('receptorctl==1.4.4', 'ansible-runner==2.4.0', 'ansible-builder==3.1.0')
# what the EE gets besides the collection's requirements.txt: the job runner's half inside the container and ansible


class AwxlabError(Exception):
    """Anything awxlab cannot do; the message says what and why."""


def _requires_ansible():
    with open(os.path.join(ROOT, 'meta', 'runtime.yml'), encoding='utf-8') as handle:
        for line in handle:
            if line.startswith('requires_ansible:'):
                return line.split(':', 1)[1].strip().strip('\'"').replace(' ', '')
    raise AwxlabError('meta/runtime.yml names no requires_ansible')


EE_PYTHON = ('ansible-core' + _requires_ansible(), 'ansible-runner==2.4.0')
# what ansible-builder's builder stage installs for itself (bindep, introspection)
EE_BUILDER = ('bindep', 'PyYAML', 'packaging', 'requirements-parser', 'setuptools', 'wheel')
BASE_PACKAGES = ('python3', 'python3-pip', 'python3-venv', 'libvirt0', 'libvirt-clients', 'openssh-client', 'ca-certificates',
                 'git', 'tini', 'dumb-init', 'locales', 'sshpass', 'rsync', 'procps')
SUITE = 'bookworm'
MIRROR = 'http://deb.debian.org/debian'
BASE_IMAGE = 'localhost/converge-virt-awx-base'
EE_IMAGE = 'localhost/converge-virt-ee'
# the decision environment (issue 38 item 5): what ansible-rulebook runs the collection's event sources in - the EE's
# Debian base plus Java (ansible-rulebook's Drools engine runs in a JVM: Debian's default-jre-headless, OpenJDK 17 in
# bookworm), and ansible-rulebook (the host's .venv pins the same version: test-requirements.txt, test_rulebook_e2e)
DE_BASE_PACKAGES = BASE_PACKAGES + ('default-jre-headless',)
DE_PYTHON = ('ansible-rulebook==1.3.2',)
DE_BASE_IMAGE = 'localhost/converge-virt-de-base'
DE_IMAGE = 'localhost/converge-virt-de'
NICE = ['nice', '-n', '10']
# the host's Debian packages the build and the mesh need (installed by `make awx`, which asks
# `python -m tools.awxlab packages` which are missing): podman runs the EE (runc: crun refuses this machine's hybrid
# cgroup layout; buildah, uidmap, slirp4netns and fuse-overlayfs are podman's storage, user-namespace and network helpers),
# mmdebstrap makes the base image's root file system. Go is not among them: the kube set-up installs it.
APT_PACKAGES = ('podman', 'buildah', 'runc', 'uidmap', 'slirp4netns', 'fuse-overlayfs', 'mmdebstrap')


def cache_root():
    """The cache directory (outside the checkout)."""
    explicit = os.environ.get('CONVERGE_VIRT_AWX_CACHE')
    if explicit:
        return os.path.abspath(explicit)
    # not XDG_CACHE_HOME: the tests set it to build/cache, and the EE (podman's storage) is the machine's anyway
    return os.path.join(os.path.expanduser('~'), '.cache', 'converge-virt', 'awx')


def _run(argv, *, cwd=None, env=None, log=None, what=None):
    """Run ``argv``; raise AwxlabError naming the step with the end of its output when it fails."""
    out = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if log:
        with open(log, 'a', encoding='utf-8') as handle:
            handle.write('$ ' + ' '.join(argv) + '\n' + out.stdout + '\n')
    if out.returncode != 0:
        raise AwxlabError(f"{what or argv[0]} failed (exit {out.returncode}): {out.stdout.strip()[-3000:]}")
    return out.stdout


def _digest(*items):
    digest = hashlib.sha256()
    for item in items:
        digest.update(repr(item).encode() + b'\0')
    return digest.hexdigest()[:10]


def _file_digest(paths, root=ROOT):
    digest = hashlib.sha256()
    for path in paths:
        digest.update(os.path.relpath(path, root).encode() + b'\0')
        with open(path, 'rb') as handle:
            digest.update(handle.read() + b'\0')
    return digest.hexdigest()[:10]


def _go():
    found = shutil.which('go') or '/usr/local/go/bin/go'
    if not os.path.exists(found):
        raise AwxlabError('go is not installed: receptor is built from its Go module (make apt / the kube set-up installs Go)')
    return found


def _go_env():
    env = dict(os.environ, GOFLAGS='-mod=mod', GOTOOLCHAIN='local', CGO_ENABLED='0')
    return env


def _in_place(final, build_into):
    """Build into a temporary directory beside ``final`` with ``build_into(tmp)``, then rename it into place."""
    if os.path.isdir(final):
        return final, False
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(final) + '.tmp-', dir=os.path.dirname(final))
    try:
        build_into(tmp)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, True


# --- receptor -----------------------------------------------------------------------------------------------------------

# receptor v1.4.4's netceptor delivers each packet for a local service with a blocking channel send
# (pkg/netceptor/netceptor.go, handleMessageData: ``case pc.recvChan <- md:``); a PacketConn whose reader has gone
# (short-lived control-service connections: the remote unit's status polls and its release) but whose context is
# not done blocks the whole backend connection's reader: the link then times out idle, is never redialed, and the
# next job to that node stays Pending. Seen here 2026-11-28 (a goroutine dump of the control receptor, the socket
# in CLOSE-WAIT with 55-68 kB unread) within 1-4 jobs; with the packet dropped after a second instead (QUIC, which
# netceptor's streams run on, sends it again), 16 of 16 jobs with release passed. Applied to the module's copy.
NETCEPTOR_PATCH = ('pkg/netceptor/netceptor.go',
                   """\t\tcase pc.recvChan <- md:\n\t\t}\n""",
                   """\t\tcase pc.recvChan <- md:\n\t\tcase <-time.After(time.Second):\n"""
                   """\t\t\t// awxlab: a PacketConn nobody reads must not stall the whole backend connection\n\t\t}\n""")


def receptor_dir():
    go_version = _run([_go(), 'env', 'GOVERSION']).strip()
    key = _digest(RECEPTOR_MODULE, RECEPTOR_VERSION, go_version, NETCEPTOR_PATCH)
    return os.path.join(cache_root(), f"receptor-{RECEPTOR_VERSION}-{key}")


def build_receptor():
    def build_into(tmp):
        log = os.path.join(tmp, 'build.log')
        holder = os.path.join(tmp, 'mod')
        os.makedirs(holder)
        _run([_go(), 'mod', 'init', 'awxlab.local/holder'], cwd=holder, env=_go_env(), log=log)
        info = json.loads(_run([_go(), 'mod', 'download', '-json', f"{RECEPTOR_MODULE}@{RECEPTOR_VERSION}"], cwd=holder,
                               env=_go_env(), what='go mod download receptor'))
        source = os.path.join(tmp, 'src')
        shutil.copytree(info['Dir'], source)
        for base, dirs, files in os.walk(source):
            for name in dirs + files:
                os.chmod(os.path.join(base, name), 0o755 if name in dirs else 0o644)
        os.chmod(source, 0o755)
        path, old, new = NETCEPTOR_PATCH
        with open(os.path.join(source, path), encoding='utf-8') as handle:
            text = handle.read()
        if text.count(old) != 1:
            raise AwxlabError(f"receptor {RECEPTOR_VERSION} {path}: the text the netceptor patch replaces occurs {text.count(old)} times, not once")
        with open(os.path.join(source, path), 'w', encoding='utf-8') as handle:
            handle.write(text.replace(old, new))
        _run(NICE + [_go(), 'build', '-o', os.path.join(tmp, 'receptor'), './cmd/receptor-cl'], cwd=source, env=_go_env(),
             log=log, what='go build receptor')
        shutil.rmtree(source)
        shutil.rmtree(holder)
    return _in_place(receptor_dir(), build_into)


def receptor_binary():
    return os.path.join(receptor_dir(), 'receptor')


# --- the lab's virtualenv -----------------------------------------------------------------------------------------------

def venv_dir():
    return os.path.join(cache_root(), f"venv-{_digest(VENV_REQUIREMENTS, sys.version_info[:2])}")


def build_venv():
    """A virtualenv is not relocatable (its scripts name its path): built in place, complete when ``.complete`` is there."""
    final = venv_dir()
    marker = os.path.join(final, '.complete')
    if os.path.exists(marker):
        return final, False
    shutil.rmtree(final, ignore_errors=True)
    try:
        _run([sys.executable, '-m', 'venv', final], what='python -m venv')
        _run(NICE + [os.path.join(final, 'bin', 'python'), '-m', 'pip', 'install', '-q', *VENV_REQUIREMENTS],
             log=os.path.join(final, 'build.log'), what='pip install ' + ' '.join(VENV_REQUIREMENTS))
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise
    with open(marker, 'w', encoding='utf-8') as handle:
        handle.write('complete\n')
    return final, True


def venv_bin(name):
    return os.path.join(venv_dir(), 'bin', name)


# --- the wheelhouse -----------------------------------------------------------------------------------------------------

def _collection_requirements():
    with open(os.path.join(ROOT, 'requirements.txt'), encoding='utf-8') as handle:
        return [line.split('#')[0].strip() for line in handle if line.split('#')[0].strip()]


def wheelhouse_dir():
    return os.path.join(cache_root(), f"wheelhouse-{_digest(_collection_requirements(), EE_PYTHON, EE_BUILDER, sys.version_info[:2])}")


def _build_wheels(final, extra, what):
    def build_into(tmp):
        # pip wheel: wheels where PyPI has them, built here where it has only a source (libvirt-python, against this
        # bookworm machine's libvirt-dev: the EE's libvirt0 is the same Debian release's)
        _run(NICE + [sys.executable, '-m', 'pip', 'wheel', '-q', '--wheel-dir', tmp, *_collection_requirements(), *EE_PYTHON,
                     *EE_BUILDER, *extra], log=os.path.join(tmp, 'build.log'), what=f'pip wheel ({what})')
    return _in_place(final, build_into)


def build_wheelhouse():
    return _build_wheels(wheelhouse_dir(), (), 'the EE wheelhouse')


def de_wheelhouse_dir():
    return os.path.join(cache_root(), f"dewheelhouse-{_digest(_collection_requirements(), EE_PYTHON, EE_BUILDER, DE_PYTHON, sys.version_info[:2])}")


def build_de_wheelhouse():
    return _build_wheels(de_wheelhouse_dir(), DE_PYTHON, 'the decision environment wheelhouse')


# --- the Debian base image ----------------------------------------------------------------------------------------------

CONTAINERS_CONF = ('[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
                   '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n')


def podman_env():
    """podman's environment here: a containers.conf with runc (crun refuses this machine's hybrid cgroup layout),
    cgroupfs and default ulimits this machine allows (nofile 20000, nproc 32768)."""
    path = os.path.join(cache_root(), 'containers.conf')
    os.makedirs(cache_root(), exist_ok=True)
    if not os.path.exists(path) or open(path, encoding='utf-8').read() != CONTAINERS_CONF:  # pylint: disable=consider-using-with
        with open(path, 'w', encoding='utf-8') as handle:
            handle.write(CONTAINERS_CONF)
    return dict(os.environ, CONTAINERS_CONF=path)


def _image_exists(ref):
    return subprocess.run(['podman', 'image', 'exists', ref], env=podman_env(), check=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def base_dir():
    return os.path.join(cache_root(), f"base-{_digest(SUITE, MIRROR, BASE_PACKAGES)}")


def base_image():
    return f"{BASE_IMAGE}:{os.path.basename(base_dir()).split('-')[-1]}"


def _build_rootfs_image(final, image, packages, what):
    def build_into(tmp):
        tarball = os.path.join(tmp, 'rootfs.tar')
        _run(NICE + ['mmdebstrap', '--variant=minbase', '--include=' + ','.join(packages), '--format=tar',
                     SUITE, tarball, MIRROR], log=os.path.join(tmp, 'build.log'), what=f'mmdebstrap ({what})')
    final, built = _in_place(final, build_into)
    if built or not _image_exists(image):
        _run(['podman', 'import', '--change', 'CMD ["/bin/bash"]', os.path.join(final, 'rootfs.tar'), image],
             env=podman_env(), what=f'podman import ({what})')
    return final, built


def build_base():
    return _build_rootfs_image(base_dir(), base_image(), BASE_PACKAGES, 'the Debian base image')


def de_base_dir():
    return os.path.join(cache_root(), f"debase-{_digest(SUITE, MIRROR, DE_BASE_PACKAGES)}")


def de_base_image():
    return f"{DE_BASE_IMAGE}:{os.path.basename(de_base_dir()).split('-')[-1]}"


def build_de_base():
    return _build_rootfs_image(de_base_dir(), de_base_image(), DE_BASE_PACKAGES, 'the decision environment\'s Debian base image')


# --- the execution environment ------------------------------------------------------------------------------------------

SOURCE_COMMIT = 'CONVERGE_VIRT_AWX_COMMIT'


def collection_source():
    """The tree the EE's collection is built from: the checkout as it is, or, when ``$CONVERGE_VIRT_AWX_COMMIT`` names a
    commit, that commit's tree (``git archive`` into ``<cache>/src-<sha>``): an EE of committed code only, not of
    unfinished edits in a working tree several people share, and one that does not change with each of them."""
    commit = os.environ.get(SOURCE_COMMIT)
    if not commit:
        return ROOT
    sha = _run(['git', '-C', ROOT, 'rev-parse', '--verify', '--end-of-options', commit + '^{commit}'],
               what=f'git rev-parse {SOURCE_COMMIT}').strip()

    def build_into(tmp):
        archive = subprocess.run(['git', '-C', ROOT, 'archive', '--format=tar', sha], stdout=subprocess.PIPE, check=False)
        if archive.returncode != 0:
            raise AwxlabError(f'git archive {sha} failed (exit {archive.returncode})')
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter='data')
    return _in_place(os.path.join(cache_root(), 'src-' + sha[:12]), build_into)[0]


def _collection_tarball_inputs(root):
    files = []
    for top in ('galaxy.yml', 'requirements.txt', 'bindep.txt', 'meta', 'plugins', 'roles', 'playbooks', 'extensions'):
        path = os.path.join(root, top)
        if os.path.isfile(path):
            files.append(path)
        else:
            for base, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d != '__pycache__')
                files += [os.path.join(base, name) for name in sorted(names) if not name.endswith('.pyc')]
    return files


def ee_dir():
    root = collection_source()
    key = _digest(base_image(), os.path.basename(wheelhouse_dir()), _file_digest(_collection_tarball_inputs(root), root), VENV_REQUIREMENTS)
    return os.path.join(cache_root(), f"ee-{key}")


def ee_image():
    return f"{EE_IMAGE}:{os.path.basename(ee_dir()).split('-')[-1]}"


def de_dir():
    root = collection_source()
    key = _digest(de_base_image(), os.path.basename(de_wheelhouse_dir()), _file_digest(_collection_tarball_inputs(root), root),
                  VENV_REQUIREMENTS, DE_PYTHON)
    return os.path.join(cache_root(), f"de-{key}")


def de_image():
    return f"{DE_IMAGE}:{os.path.basename(de_dir()).split('-')[-1]}"


def _definition(tarball_name, base=None, python=()):
    """The EE definition (ansible-builder v3): Debian base, the collection from its own tarball, pip from the wheelhouse;
    for the decision environment, ``base`` is the DE's base (with Java) and ``python`` adds ansible-rulebook."""
    definition = {
        'version': 3,
        'images': {'base_image': {'name': base or base_image()}},
        # Debian's python3 and pip come from apt (in the base image): ansible-builder must not bootstrap pip itself
        # dumb-init (the EE's init) is Debian's, in the base image: no pip package for it
        'options': {'skip_pip_install': True, 'package_manager_path': '/bin/true', 'skip_ansible_check': False,
                    'user': '1000', 'container_init': {'package_pip': '', 'entrypoint': '["/opt/builder/bin/entrypoint", "dumb-init"]',
                                                       'cmd': '["bash"]'}},
        'dependencies': {
            'python_interpreter': {'python_path': '/usr/bin/python3'},
            'ansible_core': {'package_pip': EE_PYTHON[0]},
            'ansible_runner': {'package_pip': EE_PYTHON[1]},
            # the collection's own meta/execution-environment.yml (requirements.txt, bindep.txt) is read by
            # ansible-builder's introspection; bindep's build packages go to package_manager_path /bin/true: the
            # base image has the run-time ones, and libvirt-python arrives as a wheel
            'galaxy': {'collections': [{'name': '/build/' + tarball_name, 'type': 'file'}]},
        },
        'additional_build_files': [{'src': 'wheelhouse', 'dest': 'wheelhouse'}, {'src': tarball_name, 'dest': '.'}],
        'additional_build_steps': {
            # every later stage (galaxy, builder, final) starts FROM base: the wheelhouse and pip's settings are there
            'prepend_base': ['ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/build/wheelhouse PIP_BREAK_SYSTEM_PACKAGES=1 '
                             'PIP_DISABLE_PIP_VERSION_CHECK=1',
                             'COPY _build/wheelhouse /build/wheelhouse', 'COPY _build/' + tarball_name + ' /build/' + tarball_name],
        },
    }
    if python:
        definition['dependencies']['python'] = list(python)
    return definition


def _build_image(final, tag, base, wheelhouse, python=()):  # pylint: disable=too-many-arguments
    """An EE (or DE) image ``tag`` from the collection, on ``base``, pip reading only ``wheelhouse``; into ``final``."""
    def build_into(tmp):
        log = os.path.join(tmp, 'build.log')
        started = time.monotonic()
        context = os.path.join(tmp, 'context')
        work = os.path.join(tmp, 'work')
        os.makedirs(work)
        # the collection as ansible-galaxy builds it (what a job template's EE installs)
        galaxy = os.path.join(os.path.dirname(sys.executable), 'ansible-galaxy')
        _run([galaxy if os.path.exists(galaxy) else 'ansible-galaxy', 'collection', 'build', '--output-path', work, collection_source()], log=log,
             what='ansible-galaxy collection build')
        tarball = os.path.basename(glob.glob(os.path.join(work, '*.tar.gz'))[0])
        shutil.copytree(wheelhouse, os.path.join(work, 'wheelhouse'), ignore=shutil.ignore_patterns('build.log'))
        definition = os.path.join(work, 'execution-environment.yml')
        with open(definition, 'w', encoding='utf-8') as handle:
            json.dump(_definition(tarball, base, python), handle, indent=1)   # JSON is YAML
        _run(NICE + [venv_bin('ansible-builder'), 'create', '-f', definition, '-c', context, '--output-filename', 'Containerfile'],
             cwd=work, log=log, what='ansible-builder create')
        _run(NICE + ['podman', 'build', '--network=none', '--pull=never', '-f', os.path.join(context, 'Containerfile'),
                     '-t', tag, context], env=podman_env(), log=log, what='podman build (the EE)')
        size = json.loads(_run(['podman', 'image', 'inspect', tag], env=podman_env()))[0]['Size']
        with open(os.path.join(tmp, 'image.json'), 'w', encoding='utf-8') as handle:
            json.dump({'image': tag, 'size': size, 'seconds': round(time.monotonic() - started, 1)}, handle)
    final, built = _in_place(final, build_into)
    if not built and not _image_exists(tag):
        shutil.rmtree(final)
        return _build_image(final, tag, base, wheelhouse, python)
    return final, built


def build_ee():
    return _build_image(ee_dir(), ee_image(), base_image(), wheelhouse_dir())


def build_de():
    """The decision environment: the collection (its event sources), ansible-rulebook and Java, as ansible-builder
    builds a DE for EDA; tagged ``localhost/converge-virt-de:<hash>``."""
    return _build_image(de_dir(), de_image(), de_base_image(), de_wheelhouse_dir(), DE_PYTHON)


STEPS = (('receptor', build_receptor), ('venv', build_venv), ('wheelhouse', build_wheelhouse), ('base', build_base),
         ('ee', build_ee), ('debase', build_de_base), ('dewheelhouse', build_de_wheelhouse), ('de', build_de))


def missing_packages():
    """The names of APT_PACKAGES that dpkg does not list as installed, in APT_PACKAGES' order."""
    missing = []
    for package in APT_PACKAGES:
        out = subprocess.run(['dpkg-query', '-W', '-f=${Status}', package], check=False, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        if out.returncode != 0 or not out.stdout.endswith('ok installed'):
            missing.append(package)
    return missing


def check_packages():
    """Raise AwxlabError naming the missing Debian packages and how to install them; nothing is built then."""
    missing = missing_packages()
    if missing:
        raise AwxlabError(f"Debian packages missing: {' '.join(missing)} (make awx installs them: "
                          f"apt-get install --no-install-recommends {' '.join(missing)})")


def build(only=None):
    """Build the missing parts; return [(name, directory, built, seconds)]. The Debian packages are checked first."""
    check_packages()
    results = []
    for name, step in STEPS:
        if only and name not in only:
            continue
        started = time.monotonic()
        final, built = step()
        results.append((name, final, built, round(time.monotonic() - started, 1)))
    return results


def built():
    """True when every part of the mesh is in the cache (the mesh test needs them all; the DE: ``de_built``)."""
    try:
        return all(os.path.isdir(path) for path in (receptor_dir(), wheelhouse_dir(), base_dir(), ee_dir())) \
            and os.path.exists(os.path.join(venv_dir(), '.complete')) \
            and _image_exists(ee_image())
    except (AwxlabError, OSError):
        return False


def de_built():
    """True when the decision environment's image is built."""
    try:
        return os.path.isdir(de_dir()) and _image_exists(de_image())
    except (AwxlabError, OSError):
        return False
