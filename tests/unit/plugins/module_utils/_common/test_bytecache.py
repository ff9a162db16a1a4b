# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bytecode cache of module_utils loaded from an AnsiballZ zip: same code, compiled at most once."""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import sys
import traceback
import types
import zipfile

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

PACKAGE_DIR = 'ansible_collections/converge/virt/plugins/module_utils'


def make_zip(tmp_path, files, name='payload.zip'):
    """A zip like AnsiballZ's: files is {relative path under module_utils: source}."""
    path = str(tmp_path / name)
    with zipfile.ZipFile(path, 'w', compression=zipfile.ZIP_DEFLATED) as archive:
        for relative, source in files.items():
            archive.writestr(PACKAGE_DIR + '/' + relative, source)
    return path + '/' + PACKAGE_DIR


def load(finder, tail, entry):
    """Import PACKAGE + tail through finder only (not registered in sys.modules)."""
    spec = finder.find_spec(bytecache.PACKAGE + tail, [entry])
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return spec, module


def new_finder(directory, write=True):
    return bytecache._Finder(bytecache.ByteCache(directory, write=write))  # pylint: disable=protected-access


@pytest.fixture
def cache_dir(tmp_path):
    path = tmp_path / 'cache' / 'converge.virt' / 'bytecode'
    assert bytecache._prepare(str(path))  # pylint: disable=protected-access
    return str(path)


def test_second_run_uses_the_cached_code_with_the_new_file_name(tmp_path, cache_dir):
    entry = make_zip(tmp_path, {'probe_a.py': 'VALUE = 6 * 7\n\ndef where():\n    return where.__code__.co_filename\n'})
    first = new_finder(cache_dir)
    spec, module = load(first, 'probe_a', entry)
    assert module.VALUE == 42
    assert (first.cache.hits, first.cache.misses) == (0, 1)
    assert module.__file__ == spec.origin == entry + '/probe_a.py'
    assert os.listdir(cache_dir) == ['%sprobe_a.%s.bin' % (bytecache.PACKAGE, sys.implementation.cache_tag)]

    # the next task runs from another temporary directory: the code is reused, file names follow the new place
    entry2 = make_zip(tmp_path, {'probe_a.py': 'VALUE = 6 * 7\n\ndef where():\n    return where.__code__.co_filename\n'}, name='other.zip')
    second = new_finder(cache_dir)
    spec2, module2 = load(second, 'probe_a', entry2)
    assert (second.cache.hits, second.cache.misses) == (1, 0)
    assert module2.VALUE == 42
    assert module2.where() == spec2.origin == entry2 + '/probe_a.py'


def test_changed_source_is_compiled_again_and_replaces_the_entry(tmp_path, cache_dir):
    finder = new_finder(cache_dir)
    load(finder, 'probe_b', make_zip(tmp_path, {'probe_b.py': 'VALUE = 1\n'}))
    finder = new_finder(cache_dir)
    _spec, module = load(finder, 'probe_b', make_zip(tmp_path, {'probe_b.py': 'VALUE = 2\n'}, name='new.zip'))
    assert module.VALUE == 2
    assert (finder.cache.hits, finder.cache.misses) == (0, 1)
    assert len(os.listdir(cache_dir)) == 1  # one entry per module, never growing with versions
    finder = new_finder(cache_dir)
    _spec, module = load(finder, 'probe_b', make_zip(tmp_path, {'probe_b.py': 'VALUE = 2\n'}, name='again.zip'))
    assert (module.VALUE, finder.cache.hits) == (2, 1)


def test_packages_source_and_tracebacks(tmp_path, cache_dir):
    entry = make_zip(tmp_path, {'probe_pkg/__init__.py': 'NAME = "pkg"\n', 'probe_pkg/inner.py': 'def boom():\n    raise ValueError("x")\n'})
    finder = new_finder(cache_dir)
    spec, module = load(finder, 'probe_pkg', entry)
    assert module.NAME == 'pkg'
    assert spec.submodule_search_locations == [entry + '/probe_pkg']
    assert spec.loader.is_package(spec.name)
    inner_spec = finder.find_spec(bytecache.PACKAGE + 'probe_pkg.inner', spec.submodule_search_locations)
    inner = importlib.util.module_from_spec(inner_spec)
    inner_spec.loader.exec_module(inner)
    assert not inner_spec.loader.is_package(inner_spec.name)
    assert 'raise ValueError' in inner_spec.loader.get_source(inner_spec.name)
    with pytest.raises(ValueError) as caught:
        inner.boom()
    assert traceback.extract_tb(caught.value.__traceback__)[-1].filename == entry + '/probe_pkg/inner.py'


def test_only_this_collections_module_utils_inside_a_zip(tmp_path, cache_dir):
    finder = new_finder(cache_dir)
    entry = make_zip(tmp_path, {'probe_c.py': 'X = 1\n'})
    assert finder.find_spec('json', None) is None
    assert finder.find_spec('ansible_collections.other.coll.plugins.module_utils.probe_c', [entry]) is None
    assert finder.find_spec(bytecache.PACKAGE + 'missing', [entry]) is None
    plain = tmp_path / 'plain'
    plain.mkdir()
    (plain / 'probe_c.py').write_text('X = 1\n')
    assert finder.find_spec(bytecache.PACKAGE + 'probe_c', [str(plain)]) is None  # installed files: __pycache__ does it


@pytest.mark.parametrize('content', [b'', b'\x00' * 10, b'x' * 32 + b'not marshal data'])
def test_a_damaged_entry_is_ignored_and_rewritten(tmp_path, cache_dir, content):
    finder = new_finder(cache_dir)
    load(finder, 'probe_d', make_zip(tmp_path, {'probe_d.py': 'VALUE = "ok"\n'}))
    path = os.path.join(cache_dir, os.listdir(cache_dir)[0])
    with open(path, 'wb') as stream:
        stream.write(content)
    finder = new_finder(cache_dir)
    _spec, module = load(finder, 'probe_d', make_zip(tmp_path, {'probe_d.py': 'VALUE = "ok"\n'}, name='2.zip'))
    assert module.VALUE == 'ok'
    assert finder.cache.misses == 1
    with open(path, 'rb') as stream:
        assert len(stream.read()) > 32


@pytest.mark.parametrize('value', [42, ('not', 'code'), b'bytes', {'co_code': b''}])
def test_an_entry_with_the_right_digest_but_no_code_object_is_compiled_again_and_replaced(tmp_path, cache_dir, value):
    """marshal loads something that is not a code object (a damaged or planted entry whose digest matches): the module
    is compiled as usual instead of failing, and the entry is replaced by the compiled code."""
    source = 'VALUE = "ok"\n'
    finder = new_finder(cache_dir)
    load(finder, 'probe_g', make_zip(tmp_path, {'probe_g.py': source}))
    path = os.path.join(cache_dir, os.listdir(cache_dir)[0])
    with open(path, 'wb') as stream:
        stream.write(hashlib.sha256(source.encode()).digest() + marshal.dumps(value))
    finder = new_finder(cache_dir)
    _spec, module = load(finder, 'probe_g', make_zip(tmp_path, {'probe_g.py': source}, name='g2.zip'))
    assert module.VALUE == 'ok'
    assert (finder.cache.hits, finder.cache.misses) == (0, 1)
    with open(path, 'rb') as stream:
        data = stream.read()
    assert data[:32] == hashlib.sha256(source.encode()).digest() and isinstance(marshal.loads(data[32:]), types.CodeType)


def test_nothing_written_when_writing_is_off_or_no_directory(tmp_path, cache_dir):
    finder = new_finder(cache_dir, write=False)
    _spec, module = load(finder, 'probe_e', make_zip(tmp_path, {'probe_e.py': 'VALUE = 5\n'}))
    assert module.VALUE == 5
    assert not os.listdir(cache_dir)
    finder = new_finder(None)
    _spec, module = load(finder, 'probe_e', make_zip(tmp_path, {'probe_e.py': 'VALUE = 5\n'}, name='b.zip'))
    assert (module.VALUE, finder.cache.misses) == (5, 1)


def test_a_directory_others_can_write_is_not_used(tmp_path):
    base = tmp_path / 'shared'
    base.mkdir()
    os.chmod(str(base), 0o777)
    directory = str(base / 'bytecode')
    assert not bytecache._prepare(directory)  # pylint: disable=protected-access
    os.chmod(str(base), 0o700)
    assert bytecache._prepare(directory)  # pylint: disable=protected-access
    os.chmod(directory, 0o775)
    assert not bytecache._prepare(directory)  # pylint: disable=protected-access
    os.chmod(directory, 0o700)
    link = tmp_path / 'link'
    link.symlink_to(directory)
    assert not bytecache._private_directory(str(link))  # pylint: disable=protected-access


def test_entries_are_not_followed_through_links(tmp_path, cache_dir):
    finder = new_finder(cache_dir)
    load(finder, 'probe_f', make_zip(tmp_path, {'probe_f.py': 'VALUE = 1\n'}))
    path = os.path.join(cache_dir, os.listdir(cache_dir)[0])
    real = str(tmp_path / 'elsewhere.bin')
    os.rename(path, real)
    os.symlink(real, path)
    finder = new_finder(cache_dir, write=False)
    load(finder, 'probe_f', make_zip(tmp_path, {'probe_f.py': 'VALUE = 1\n'}, name='l.zip'))
    assert (finder.cache.hits, finder.cache.misses) == (0, 1)


def test_install_switch_and_location(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, 'meta_path', list(sys.meta_path))
    environ = {'XDG_CACHE_HOME': str(tmp_path / 'xdg')}
    assert bytecache.cache_directory(environ) == str(tmp_path / 'xdg' / 'converge.virt' / 'bytecode')
    assert bytecache.install(environ) is None  # unit tests run from files, not from a zip
    assert bytecache.install(dict(environ, CONVERGE_VIRT_BYTECODE_CACHE='0'), force=True) is None
    before = len(sys.meta_path)
    cache = bytecache.install(environ, force=True)
    assert cache is not None and cache.directory == bytecache.cache_directory(environ)
    assert os.stat(cache.directory).st_mode & 0o777 == 0o700
    assert bytecache.install(environ, force=True) is cache
    assert len(sys.meta_path) == before + 1 and isinstance(sys.meta_path[0], bytecache._Finder)  # pylint: disable=protected-access


def test_nothing_is_created_outside_a_directory_of_this_user(tmp_path, monkeypatch):
    assert not bytecache._prepare(os.path.join('~', '.cache', 'converge.virt', 'bytecode'))  # pylint: disable=protected-access
    assert not os.path.exists('~')
    home = tmp_path / 'someone'
    home.mkdir()
    directory = str(home / '.cache' / 'converge.virt' / 'bytecode')
    real_stat = os.stat

    def stat_as_other_owner(path, *args, **kwargs):
        info = real_stat(path, *args, **kwargs)
        if str(path) == str(home):
            return os.stat_result((info.st_mode, info.st_ino, info.st_dev, info.st_nlink, os.geteuid() + 1) + tuple(info)[5:10])
        return info
    monkeypatch.setattr(os, 'stat', stat_as_other_owner)
    assert not bytecache._prepare(directory)  # pylint: disable=protected-access
    assert not (home / '.cache').exists()
    monkeypatch.setattr(os, 'stat', real_stat)
    assert bytecache._prepare(directory) and os.path.isdir(directory)  # pylint: disable=protected-access
