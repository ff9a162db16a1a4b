# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compiled bytecode of this collection's module_utils, kept between module runs on the managed host.

Ansible runs a module from a zip file (AnsiballZ) in a new directory on every task, so Python
compiles every imported module_utils source again on every run: for a no-op ``vm`` task that
is about half of the module's own cost. ``install()`` puts a finder in front of the import
system for ``ansible_collections.converge.virt.plugins.module_utils.*`` only; it loads the
source as usual, and reuses the code compiled by an earlier run when the source is byte for
byte the same (SHA-256 of the source, Python's cache tag), as Python's own ``__pycache__``
does for installed files.

Where: ``$XDG_CACHE_HOME/converge.virt/bytecode`` (default ``~/.cache/...``) of the user the
module runs as, one file per module (a new version of the collection overwrites it, so the
cache never grows past one entry per module). The directory must be owned by that user and
not writable by group or others, files are opened without following links; otherwise the
cache is not used. Any failure means "compile as usual": the cache can make a module faster,
never different (an entry that does not hold a code object is compiled again and replaced).
Turned off by ``CONVERGE_VIRT_BYTECODE_CACHE=0`` in the module's environment. ``PYTHONDONTWRITEBYTECODE``
does not turn it off: that variable keeps ``__pycache__`` directories out of source trees, and container
images (execution environments among them) set it as a matter of course; this cache lives in the user's
own cache directory, and without it every task compiles the whole module_utils tree again (about 60 ms of
CPU for a no-op ``vm`` task, measured with bench/module_cpu.py).
"""

from __future__ import annotations

import hashlib
import marshal
import os
import stat
import sys
import types
import zipimport
from importlib.machinery import ModuleSpec

try:
    from _imp import _fix_co_filename
except ImportError:  # not CPython: no cache
    _fix_co_filename = None

PACKAGE = 'ansible_collections.converge.virt.plugins.module_utils.'
ENV_SWITCH = 'CONVERGE_VIRT_BYTECODE_CACHE'
_DIGEST = 32


def cache_directory(environ=None):
    """The cache directory for the current user (not created)."""
    environ = os.environ if environ is None else environ
    base = environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'converge.virt', 'bytecode')


def _private_directory(path):
    """True when path is a real directory owned by this user, not writable by group or others."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _owned(path):
    """True when path exists and belongs to this user (a home or cache directory of someone else is never written)."""
    try:
        return os.stat(path).st_uid == os.geteuid()
    except OSError:
        return False


def _prepare(directory):
    """Create the directory (0700) when missing; True when it is safe to use.

    Nothing is created outside a directory of this user: the cache base (~/.cache or $XDG_CACHE_HOME) must be
    an absolute path, and it or (when it does not exist yet) its parent must belong to the user the module runs as.
    """
    parent = os.path.dirname(directory)
    base = os.path.dirname(parent)
    if not os.path.isabs(directory) or not (_owned(base) or (not os.path.lexists(base) and _owned(os.path.dirname(base)))):
        return False
    for path in (parent, directory):
        if not os.path.lexists(path):
            try:
                os.makedirs(path, mode=0o700, exist_ok=True)
            except OSError:
                return False
        if not _private_directory(path):
            return False
    return True


class ByteCache:
    """Code objects keyed by module name; valid only for the exact source they came from.

    Without a directory (none usable) every source is compiled, once.
    """

    def __init__(self, directory, write=True):
        self.directory = directory
        self.write = write
        self.tag = sys.implementation.cache_tag
        self.hits = 0
        self.misses = 0

    def _path(self, name):  # only with a directory
        return os.path.join(self.directory, '%s.%s.bin' % (name, self.tag))

    def _read(self, name, digest):
        try:
            fd = os.open(self._path(name), os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0))
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if info.st_uid != os.geteuid() or not stat.S_ISREG(info.st_mode):
                return None
            with os.fdopen(fd, 'rb') as stream:
                fd = None
                data = stream.read()
        finally:
            if fd is not None:
                os.close(fd)
        if data[:_DIGEST] != digest:
            return None
        try:
            code = marshal.loads(data[_DIGEST:])
        except (EOFError, ValueError, TypeError):
            return None
        # the right digest with something else than a code object (a damaged or planted entry): compiled again, replaced
        return code if isinstance(code, types.CodeType) else None

    def _store(self, name, digest, code):
        temp = '%s.%d.tmp' % (self._path(name), os.getpid())
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_NOFOLLOW', 0), 0o600)
            with os.fdopen(fd, 'wb') as stream:
                stream.write(digest + marshal.dumps(code))
            os.replace(temp, self._path(name))
        except (OSError, ValueError):
            try:
                os.unlink(temp)
            except OSError:
                pass

    def code(self, name, origin, source):
        """The code object for source (bytes) of module name, found at origin."""
        digest = hashlib.sha256(source).digest() if self.directory is not None else None
        code = self._read(name, digest) if digest is not None else None
        if code is not None:
            _fix_co_filename(code, origin)
            self.hits += 1
            return code
        self.misses += 1
        code = compile(source, origin, 'exec', dont_inherit=True)
        if self.write and digest is not None:
            self._store(name, digest, code)
        return code


class _ZipSourceLoader:
    """Loads one module_utils source from the AnsiballZ zip, its code through the cache.

    Python's zipimport compiles a module twice (once in find_spec, to learn its file name, and
    once in exec_module); this loader reads the source once and compiles it at most once.
    """

    def __init__(self, importer, origin, source, cache):
        self._importer = importer
        self._origin = origin
        self._source = source
        self._cache = cache

    def create_module(self, spec):  # pylint: disable=unused-argument
        return None  # the default module object

    def exec_module(self, module):
        source, self._source = self._source, None
        if source is None:
            source = self._importer.get_data(self._origin)
        exec(self._cache.code(module.__spec__.name, self._origin, source), module.__dict__)  # pylint: disable=exec-used

    def get_filename(self, fullname):  # pylint: disable=unused-argument
        return self._origin

    def get_source(self, fullname):  # pylint: disable=unused-argument
        return self._importer.get_data(self._origin).decode('utf-8')

    def is_package(self, fullname):  # pylint: disable=unused-argument
        return self._origin.endswith('/__init__.py')

    def get_data(self, path):
        return self._importer.get_data(path)


class _Finder:
    """A meta path finder, in front of the usual ones, for this collection's module_utils inside a zip."""

    def __init__(self, cache):
        self.cache = cache

    def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
        if not fullname.startswith(PACKAGE) or not path:
            return None
        tail = fullname.rpartition('.')[2]
        for entry in path:
            importer = sys.path_importer_cache.get(entry)
            if not isinstance(importer, zipimport.zipimporter):
                try:
                    importer = zipimport.zipimporter(entry)
                except (zipimport.ZipImportError, OSError, TypeError):
                    return None  # not in a zip: the usual finders (and __pycache__) do it
            for origin, package in ((entry + '/' + tail + '/__init__.py', True), (entry + '/' + tail + '.py', False)):
                try:
                    source = importer.get_data(origin)
                except OSError:
                    continue
                spec = ModuleSpec(fullname, _ZipSourceLoader(importer, origin, source, self.cache), origin=origin, is_package=package)
                spec.has_location = True
                if package:
                    spec.submodule_search_locations = [origin.rpartition('/')[0]]
                return spec
        return None


def _from_zip():
    """True when this collection's code runs from an AnsiballZ zip (the only case that compiles on every run)."""
    return isinstance(getattr(__spec__, 'loader', None), zipimport.zipimporter)


def install(environ=None, force=False):
    """Put the cache in front of the import system (once); returns the ByteCache or None when not used.

    Only when running from an AnsiballZ zip, unless force (tests): installed files have __pycache__.
    """
    environ = os.environ if environ is None else environ
    if not (force or _from_zip()):
        return None
    for finder in sys.meta_path:
        if isinstance(finder, _Finder):
            return finder.cache
    if environ.get(ENV_SWITCH, '1').strip().lower() in ('0', 'false', 'no', 'off') or _fix_co_filename is None:
        return None
    directory = cache_directory(environ)
    cache = ByteCache(directory if _prepare(directory) else None)
    sys.meta_path.insert(0, _Finder(cache))
    return cache
