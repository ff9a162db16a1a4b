# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Direct execution (opt-in): a converge.virt module run in the task's worker process, without a module process.

Every module of the collection has an action plugin of its name (plugins/action/) built on :class:`DirectExecutionAction`,
ansible-core's ``normal`` action with one change: when the variable ``converge_virt_direct_execution`` is true for the
host and the run is safe to make in the controller's worker (:meth:`DirectExecutionAction.refusal`: a local connection,
no become, not async, the host's Python interpreter is the controller's own or automatic, the backend's library imports
in the controller), the module's code runs in the worker that executes the task instead of in a new Python process fed
an AnsiballZ payload. Otherwise, and always without the variable, the task runs exactly as it does without these
plugins (``ActionBase._execute_module``); with the variable set, ``-vvv`` says why a task did not run directly.

What the module receives and returns is what a module process gets: the arguments with ansible's internal keys
(``_ansible_check_mode``, ``_ansible_diff``, ``_ansible_no_log``, ``_ansible_verbosity``, ... from
``ActionBase._update_module_args``), serialized as the AnsiballZ payload serializes them (ansible-core 2.19: the
module's serialization profile, ``legacy``) into ``ansible.module_utils.basic._ANSIBLE_ARGS``, the module file run as
``__main__`` (``runpy``, as the AnsiballZ wrapper runs it); its printed result parsed by ``ActionBase._parse_returned_data``
and cleaned as ``_execute_module`` cleans it. The module's own ``exit_json``/``fail_json`` therefore remove the no_log
values, warnings and deprecations travel in the result, an uncaught exception becomes the failed result a module
process gives (its traceback shown only from ``-vvv``). The task's ``environment:`` is applied to ``os.environ`` for the
run. The worker process is forked for this task and ends with it; ``os.environ``, the working directory, the module
side's globals of ``ansible.module_utils`` and the standard streams are restored after the run all the same.
"""

from __future__ import annotations

import importlib
import inspect
import io
import json
import os
import runpy
import sys
import tempfile
import traceback

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.utils.display import Display
from ansible.vars.clean import remove_internal_keys

display = Display()

VARIABLE = 'converge_virt_direct_execution'
PREFIX = 'converge.virt direct execution'
COLLECTION_PREFIX = 'converge.virt.'
MODULES_PACKAGE = 'ansible_collections.converge.virt.plugins.modules.'
# backend option value -> the Python library that backend's modules import (imported in the worker before a direct run)
BACKEND_LIBRARIES = {'libvirt': 'libvirt', 'kubevirt': 'kubernetes'}
DEFAULT_BACKEND = 'libvirt'
LOCAL_CONNECTIONS = ('local', 'ansible.builtin.local', 'ansible.legacy.local')
AUTO_INTERPRETERS = ('auto', 'auto_legacy', 'auto_silent', 'auto_legacy_silent')
PROFILE = 'legacy'  # the serialization profile of a module without METADATA (ansible-core 2.19)


def wanted(value):
    """Whether the variable's (templated) value asks for direct execution; AnsibleActionFail naming it when not a boolean."""
    if value is None:
        return False
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise AnsibleActionFail('%s must be a boolean (true or false), got %r' % (VARIABLE, value)) from None


def interpreter_refusal(interpreter, executable=None):
    """Why a module run with ``interpreter`` (the host's resolved ansible_python_interpreter) may not run in this Python, or None.

    Unset or automatic: the controller's Python is used (no discovery). A path: it must be this very interpreter - the same
    file reached from the same directory (a virtual environment is recognized by the directory its executable is run from,
    so /usr/bin/python3 is not a venv's bin/python3 even where both are links to one binary).
    """
    executable = executable or sys.executable
    if interpreter is None or not str(interpreter).strip() or str(interpreter).strip() in AUTO_INTERPRETERS:
        return None
    path = str(interpreter).strip()
    mine = os.path.abspath(executable)
    if not os.path.isabs(path):
        return "the host's Python interpreter %r is not an absolute path (the controller runs %s)" % (path, mine)
    theirs = os.path.abspath(path)
    try:
        same = os.path.dirname(theirs) == os.path.dirname(mine) and os.path.samefile(theirs, mine)
    except OSError:
        same = False
    if not same:
        return "the host's Python interpreter is %s, not the controller's %s" % (theirs, mine)
    return None


def encode_arguments(module_args):
    """The module arguments as the AnsiballZ payload carries them: JSON bytes of {"ANSIBLE_MODULE_ARGS": ...}."""
    params = {'ANSIBLE_MODULE_ARGS': module_args}
    try:
        from ansible.module_utils.common.json import Direction, get_module_encoder  # pylint: disable=import-outside-toplevel
    except ImportError:  # ansible-core < 2.19: module_common serializes with AnsibleJSONEncoder
        from ansible.module_utils.common.json import AnsibleJSONEncoder  # pylint: disable=import-outside-toplevel
        text = json.dumps(params, cls=AnsibleJSONEncoder, vault_to_text=True)
    else:
        text = json.dumps(params, cls=get_module_encoder(PROFILE, Direction.CONTROLLER_TO_MODULE))
    return text.encode('utf-8', errors='surrogateescape')


class _ModuleSide:
    """For the run: ansible.module_utils as a module process has it (2.19: not the controller's), then restored.

    The warnings and deprecations a module records go to its result, not to the controller's display; tracebacks follow
    the module's ``_ansible_tracebacks_for`` argument; ``basic._ANSIBLE_ARGS`` holds this run's arguments.
    """

    def __init__(self, json_params):
        self.json_params = json_params
        self.saved = []

    def _set(self, owner, name, value):
        self.saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def __enter__(self):
        from ansible.module_utils import basic  # pylint: disable=import-outside-toplevel
        from ansible.module_utils.common import warnings  # pylint: disable=import-outside-toplevel
        self._set(basic, '_ANSIBLE_ARGS', self.json_params)
        if hasattr(basic, '_ANSIBLE_PROFILE'):
            self._set(basic, '_ANSIBLE_PROFILE', PROFILE)
            self._set(basic, '_PARSED_MODULE_ARGS', None)
        for name in ('_global_warnings', '_global_deprecations'):
            if hasattr(warnings, name):
                self._set(warnings, name, type(getattr(warnings, name))())
        try:
            from ansible.module_utils import _internal  # pylint: disable=import-outside-toplevel
            from ansible.module_utils._internal import _traceback  # pylint: disable=import-outside-toplevel
        except ImportError:  # ansible-core < 2.19: module_utils does not know where it runs
            return self
        self._set(_internal, 'is_controller', False)
        self._set(_traceback, '_is_traceback_enabled', _traceback._is_module_traceback_enabled)  # pylint: disable=protected-access
        self._set(_traceback, '_module_tracebacks_enabled_events', None)
        return self

    def __exit__(self, *exc):
        while self.saved:
            owner, name, value = self.saved.pop()
            setattr(owner, name, value)
        return False


class _Captured:
    """stdout and stderr of the run: Python's streams and file descriptors 1 and 2 (a library's C code writes there)."""

    def __init__(self):
        self.stdout = io.StringIO()
        self.stderr = io.StringIO()
        self.raw = None
        self.saved = None

    def __enter__(self):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        self.raw = tempfile.TemporaryFile()
        self.saved = (sys.stdout, sys.stderr, os.dup(1), os.dup(2))
        os.dup2(self.raw.fileno(), 1)
        os.dup2(self.raw.fileno(), 2)
        sys.stdout, sys.stderr = self.stdout, self.stderr
        return self

    def __exit__(self, *exc):
        sys.stdout, sys.stderr, out_fd, err_fd = self.saved
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(out_fd)
        os.close(err_fd)
        self.raw.seek(0)
        raw = self.raw.read().decode('utf-8', errors='replace')
        self.raw.close()
        if raw:
            self.stderr.write(raw)
        return False


def run_module_here(module_fqn, json_params, environment):
    """Run the module ``module_fqn`` (a Python module name) as ``__main__`` in this process; (rc, stdout, stderr).

    As the AnsiballZ wrapper does: the arguments in ``basic._ANSIBLE_ARGS``, ``runpy`` with ``alter_sys``; the module
    exits through SystemExit. An uncaught exception: on 2.19 the module-side handler prints the failed result (the
    wrapper's own), before it the traceback on stderr with rc 1 (what the Python of a module process prints).
    """
    environ = dict(os.environ)
    cwd = os.getcwd()
    rc = 0
    os.environ.update(dict((str(key), str(value)) for key, value in environment.items()))
    try:
        with _Captured() as captured, _ModuleSide(json_params):
            try:
                try:
                    from ansible.module_utils._internal._ansiballz import _loader  # pylint: disable=import-outside-toplevel
                except ImportError:
                    runpy.run_module(mod_name=module_fqn, init_globals=dict(_module_fqn=module_fqn, _modlib_path=None),
                                     run_name='__main__', alter_sys=True)
                    print('{"msg": "New-style module did not handle its own exit", "failed": true}')
                    rc = 1
                else:
                    _loader.run_module(json_params=json_params, profile=PROFILE, module_fqn=module_fqn, modlib_path=None,
                                       extensions={})
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # pylint: disable=broad-except  # a module process's Python prints it and exits 1
                traceback.print_exc(file=sys.stderr)
                rc = 1
    finally:
        os.environ.clear()
        os.environ.update(environ)
        try:
            os.chdir(cwd)
        except OSError:
            pass
    return rc, captured.stdout.getvalue(), captured.stderr.getvalue()


class DirectExecutionAction(NormalAction):
    """ansible-core's normal action; the module runs in this worker when asked and safe (see the module docstring)."""

    def module_refusal(self, module_args):  # pylint: disable=unused-argument
        """A reason of the module's own not to run these arguments directly (None: none). Overridden per module."""
        return None

    def _host(self, task_vars):
        return task_vars.get('inventory_hostname') if task_vars else None

    def _host_vars(self, task_vars):
        """The variables of the host the module runs on (the delegated host's with delegate_to)."""
        if self._task.delegate_to:
            delegated = task_vars.get('ansible_delegated_vars') or {}
            return delegated.get(self._task.delegate_to, task_vars)
        return task_vars

    def direct_wanted(self, task_vars):
        """True when the task's host asks for direct execution (the variable, templated)."""
        value = task_vars.get(VARIABLE) if task_vars else None
        if isinstance(value, str):
            value = self._templar.template(value)
        return wanted(value)

    def refusal(self, module_args, task_vars, wrap_async=False):
        """Why this task may not run directly (a sentence), or None when it may."""
        if wrap_async or self._task.async_val:
            return 'the task is async'
        connection = getattr(self._connection, '_load_name', None) or getattr(self._connection, 'transport', None)
        if connection not in LOCAL_CONNECTIONS:
            return 'the connection is %s, not local' % connection
        if self._play_context.become or getattr(self._connection, 'become', None) is not None:
            return 'become is on'
        host_vars = self._host_vars(task_vars)
        interpreter = C.config.get_config_value('INTERPRETER_PYTHON', variables=host_vars)
        if isinstance(interpreter, str) and '{' in interpreter:
            interpreter = self._templar.template(interpreter)
        reason = interpreter_refusal(interpreter)
        if reason:
            return reason
        try:
            metadata = C.config.get_config_value('_MODULE_METADATA')
        except Exception:  # pylint: disable=broad-except  # ansible-core < 2.19: no such setting
            metadata = False
        if metadata:
            return 'module metadata (serialization profiles) is on'
        reason = self.module_refusal(module_args)
        if reason:
            return reason
        backend = module_args.get('backend') or DEFAULT_BACKEND
        library = BACKEND_LIBRARIES.get(backend)
        if library:
            try:
                importlib.import_module(library)
            except Exception as exc:  # pylint: disable=broad-except  # any failure to import: the module process decides
                return 'the controller Python %s cannot import %s (%s: %s)' % (sys.executable, library, type(exc).__name__, exc)
        return None

    def _execute_module(self, module_name=None, module_args=None, tmp=None, task_vars=None, persist_files=False,
                        delete_remote_tmp=None, wrap_async=False, **kwargs):
        task_vars = {} if task_vars is None else task_vars
        args = self._task.args if module_args is None else module_args
        fqcn = self._task.resolved_action or self._task.action
        if (module_name is None or module_name == self._task.action) and self.direct_wanted(task_vars):
            reason = None if fqcn.startswith(COLLECTION_PREFIX) else '%s is not a module of converge.virt' % fqcn
            reason = reason or self.refusal(args, task_vars, wrap_async)
            if reason is None:
                return self._execute_directly(fqcn, args, task_vars)
            display.vvv('%s: not used for %s: %s' % (PREFIX, fqcn, reason), host=self._host(task_vars))
        return super()._execute_module(module_name=module_name, module_args=module_args, tmp=tmp, task_vars=task_vars,
                                       persist_files=persist_files, delete_remote_tmp=delete_remote_tmp,
                                       wrap_async=wrap_async, **kwargs)

    def _execute_directly(self, fqcn, module_args, task_vars):
        """The result of the module run in this worker, as ``_execute_module`` returns a module process's."""
        self._update_module_args(fqcn, module_args, task_vars)
        environment = {}
        self._compute_environment_string(environment)
        module_fqn = MODULES_PACKAGE + fqcn[len(COLLECTION_PREFIX):]
        display.vvv('%s: running %s in the worker process %d' % (PREFIX, module_fqn, os.getpid()), host=self._host(task_vars))
        rc, stdout, stderr = run_module_here(module_fqn, encode_arguments(module_args), environment)
        res = dict(rc=rc, stdout=stdout, stdout_lines=stdout.splitlines(), stderr=stderr, stderr_lines=stderr.splitlines())
        if 'profile' in inspect.signature(self._parse_returned_data).parameters:  # ansible-core 2.19: the profile's decoder
            data = self._parse_returned_data(res, PROFILE)  # pylint: disable=too-many-function-args
        else:
            data = self._parse_returned_data(res)  # pylint: disable=no-value-for-parameter
        data.pop('_ansible_suppress_tmpdir_delete', None)
        if 'results' in data and (not isinstance(data['results'], (list, tuple)) or isinstance(data['results'], str)):
            data['ansible_module_results'] = data.pop('results')
            display.warning("Found internal 'results' key in module return, renamed to 'ansible_module_results'.")
        remove_internal_keys(data)
        for name in ('stdout', 'stderr'):
            if name in data and name + '_lines' not in data:
                data[name + '_lines'] = (data.get(name) or '').splitlines()
        return data
