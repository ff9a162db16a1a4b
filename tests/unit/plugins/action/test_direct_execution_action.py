# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Direct execution (issue 39, plugins/plugin_utils/direct_execution.py): when a task runs in the worker, and what the module gets.

The fallback rules on an action whose task, connection and play context are stand-ins (the rest of ActionBase is not
needed to decide); the argument plumbing on real runs in this process: a module of the collection (vm_info, vm on
libvirt's test:///default driver) and a small module of this file's own (warnings, deprecations, no_log, an uncaught
exception, output written to file descriptor 1, environment and working directory changes), each result parsed by
ActionBase._parse_returned_data as a module process's output is. The end-to-end comparison with module processes through
ansible-playbook is tests/integration/test_direct_execution.py.
"""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

from ansible.errors import AnsibleActionFail
from ansible.module_utils import basic
from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.converge.virt.plugins.action import migration as migration_action
from ansible_collections.converge.virt.plugins.action import vm as vm_action
from ansible_collections.converge.virt.plugins.plugin_utils import direct_execution as de

SECRET = 'Direct-Canary-5b81'
FAKE_MODULE = '''
import os
import sys
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(secret=dict(no_log=True), value=dict(), env=dict()), supports_check_mode=True)
    module.warn('a warning from the module')
    if module.params['value'] == 'raise':
        raise RuntimeError('an uncaught error')
    if module.params['value'] == 'fail':
        module.fail_json(msg='failed, the secret was %s' % module.params['secret'])
    os.write(1, b'written by C code\\n')
    sys.stderr.write('python stderr\\n')
    os.chdir('/')
    os.environ['SET_BY_THE_MODULE'] = '1'
    module.exit_json(changed=not module.check_mode, echo=module.params['secret'], env=os.environ.get(module.params['env'] or 'HOME'),
                     check=module.check_mode, diff=module._diff, verbosity=module._verbosity)


if __name__ == '__main__':
    main()
'''


def make_action(cls=vm_action.ActionModule, connection='local', become=False, check_mode=False, **task):
    """An action of ``cls`` with stand-ins for what deciding needs (task, connection, play context, templar)."""
    action = cls.__new__(cls)
    fields = dict(async_val=0, delegate_to=None, check_mode=check_mode, args={}, action='converge.virt.vm',
                  resolved_action='converge.virt.vm', environment=None)
    fields.update(task)
    action._task = types.SimpleNamespace(**fields)
    action._connection = types.SimpleNamespace(_load_name=connection, transport=connection, become=None)
    action._play_context = types.SimpleNamespace(become=become)
    action._templar = types.SimpleNamespace(template=lambda value: value)
    action._used_interpreter = None
    return action


MINE = {'ansible_python_interpreter': sys.executable}
# ansible-core 2.19 and later: serialization profiles, module-side error summaries
PROFILES = hasattr(basic, '_ANSIBLE_PROFILE')


@pytest.fixture(autouse=True)
def no_interpreter_from_environment(monkeypatch):
    monkeypatch.delenv('ANSIBLE_PYTHON_INTERPRETER', raising=False)


@pytest.mark.parametrize('value,expected', [(None, False), (False, False), ('false', False), ('no', False), (True, True),
                                            ('true', True), ('yes', True), (1, True)])
def test_the_variable_is_a_boolean(value, expected):
    assert de.wanted(value) is expected


def test_a_variable_that_is_not_a_boolean_fails_the_task_naming_it():
    with pytest.raises(AnsibleActionFail, match=r"converge_virt_direct_execution must be a boolean .*'maybe'"):
        de.wanted('maybe')


def test_interpreter_rules(tmp_path):
    assert de.interpreter_refusal(None) is None
    assert de.interpreter_refusal('auto_silent') is None
    assert de.interpreter_refusal(sys.executable) is None
    assert 'not an absolute path' in de.interpreter_refusal('python3')
    link = tmp_path / 'python3'
    link.symlink_to(sys.executable)   # the same binary reached from another directory: another environment
    assert 'not the controller' in de.interpreter_refusal(str(link))
    assert 'not the controller' in de.interpreter_refusal(str(tmp_path / 'missing'))


def test_an_eligible_task_has_no_refusal():
    assert make_action().refusal({'name': 'x'}, MINE) is None
    assert make_action().refusal({'name': 'x'}, {}) is None, 'unset interpreter: automatic, the controller Python is used'


@pytest.mark.parametrize('change,reason', [
    (dict(async_val=30), 'the task is async'),
    (dict(connection='ssh'), 'the connection is ssh, not local'),
    (dict(connection='community.general.lxc'), 'not local'),
    (dict(become=True), 'become is on'),
])
def test_each_unsafe_setting_is_refused(change, reason):
    assert reason in make_action(**change).refusal({'name': 'x'}, MINE)


def test_a_wrapped_async_run_is_refused():
    assert make_action().refusal({}, MINE, wrap_async=True) == 'the task is async'


def test_another_interpreter_is_refused_also_through_delegation():
    refused = make_action().refusal({}, {'ansible_python_interpreter': '/usr/bin/python3-other'})
    assert 'Python interpreter is /usr/bin/python3-other' in refused
    delegated = {'ansible_python_interpreter': sys.executable,
                 'ansible_delegated_vars': {'hv': {'ansible_python_interpreter': '/opt/other/python'}}}
    assert '/opt/other/python' in make_action(delegate_to='hv').refusal({}, delegated)
    assert make_action().refusal({}, delegated) is None


def test_a_backend_library_that_does_not_import_is_refused(monkeypatch):
    monkeypatch.setitem(de.BACKEND_LIBRARIES, 'kubevirt', 'converge_virt_no_such_library')
    refused = make_action().refusal({'backend': 'kubevirt'}, MINE)
    assert 'cannot import converge_virt_no_such_library' in refused and 'ModuleNotFoundError' in refused
    assert make_action().refusal({'backend': 'libvirt'}, MINE) is None


def test_a_started_migration_is_refused_but_not_in_check_mode():
    refused = make_action(migration_action.ActionModule).refusal({'state': 'started'}, MINE)
    assert 'detached process' in refused
    assert make_action(migration_action.ActionModule, check_mode=True).refusal({'state': 'started'}, MINE) is None
    assert make_action(migration_action.ActionModule).refusal({'state': 'finished'}, MINE) is None


class Calls:
    """Which path _execute_module took, and what it said at -vvv."""

    def __init__(self, monkeypatch):
        self.normal, self.direct, self.said = [], [], []
        monkeypatch.setattr(NormalAction, '_execute_module', lambda act, **kw: self.normal.append(kw) or {'path': 'normal'})
        monkeypatch.setattr(de.DirectExecutionAction, '_execute_directly',
                            lambda act, fqcn, args, task_vars: self.direct.append((fqcn, args)) or {'path': 'direct'})
        monkeypatch.setattr(de.display, 'vvv', lambda msg, host=None: self.said.append(msg))


def test_without_the_variable_every_task_takes_the_usual_path_silently(monkeypatch):
    calls = Calls(monkeypatch)
    for task_vars in ({}, dict(MINE, converge_virt_direct_execution=False), dict(MINE, converge_virt_direct_execution='no')):
        assert make_action()._execute_module(task_vars=task_vars) == {'path': 'normal'}
    assert len(calls.normal) == 3 and not calls.direct and not calls.said


def test_with_the_variable_an_eligible_task_runs_directly(monkeypatch):
    calls = Calls(monkeypatch)
    action = make_action(args={'name': 'a'})
    assert action._execute_module(task_vars=dict(MINE, converge_virt_direct_execution=True)) == {'path': 'direct'}
    assert calls.direct == [('converge.virt.vm', {'name': 'a'})] and not calls.normal


def test_with_the_variable_an_unsafe_task_falls_back_and_says_why(monkeypatch):
    calls = Calls(monkeypatch)
    result = make_action(connection='ssh')._execute_module(task_vars=dict(MINE, converge_virt_direct_execution=True))
    assert result == {'path': 'normal'} and not calls.direct
    assert calls.said == ['converge.virt direct execution: not used for converge.virt.vm: the connection is ssh, not local']


def test_another_module_run_by_the_action_is_never_direct(monkeypatch):
    calls = Calls(monkeypatch)
    task_vars = dict(MINE, converge_virt_direct_execution=True)
    make_action()._execute_module(module_name='ansible.builtin.ping', task_vars=task_vars)
    make_action(action='other.col.vm', resolved_action='other.col.vm')._execute_module(task_vars=task_vars)
    assert len(calls.normal) == 2 and not calls.direct
    assert calls.said == ['converge.virt direct execution: not used for other.col.vm: other.col.vm is not a module of converge.virt']


def test_a_bad_value_fails_before_anything_runs(monkeypatch):
    calls = Calls(monkeypatch)
    with pytest.raises(AnsibleActionFail):
        make_action()._execute_module(task_vars=dict(MINE, converge_virt_direct_execution='sometimes'))
    assert not calls.normal and not calls.direct


def test_the_arguments_travel_as_the_payload_carries_them():
    args = {'name': 'x', 'memory': '64MiB', '_ansible_check_mode': True, 'vms': [{'name': 'é'}]}
    assert json.loads(de.encode_arguments(args).decode()) == {'ANSIBLE_MODULE_ARGS': args}


def internal_args(**extra):
    """The internal keys ActionBase._update_module_args adds (the ones the modules read; 2.19 adds the traceback events)."""
    args = {'_ansible_check_mode': False, '_ansible_diff': False, '_ansible_no_log': False, '_ansible_verbosity': 0,
            '_ansible_debug': False, '_ansible_module_name': 'fake'}
    if PROFILES:
        args['_ansible_tracebacks_for'] = []
    args.update(extra)
    return args


@pytest.fixture
def fake_module(tmp_path, monkeypatch):
    (tmp_path / 'converge_virt_direct_fake.py').write_text(FAKE_MODULE, encoding='utf-8')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(os, 'environ', os.environ.copy())  # the run restores it; this keeps the test's own apart
    return 'converge_virt_direct_fake'


def warning_text(warning):
    """A result's warning as text (2.19: a WarningSummary; before: a string)."""
    event = getattr(warning, 'event', None)
    return event.msg if event is not None else warning


def parsed(rc, stdout, stderr):
    """The result as _execute_directly hands it on: ActionBase._parse_returned_data of the run's output, cleaned."""
    action = make_action()
    res = dict(rc=rc, stdout=stdout, stdout_lines=stdout.splitlines(), stderr=stderr, stderr_lines=stderr.splitlines())
    if 'profile' in de.inspect.signature(action._parse_returned_data).parameters:
        data = action._parse_returned_data(res, de.PROFILE)
    else:
        data = action._parse_returned_data(res)
    de.remove_internal_keys(data)
    return data


def test_check_mode_diff_verbosity_environment_and_no_log_reach_the_module(fake_module):
    cwd, environ_before = os.getcwd(), dict(os.environ)
    args = internal_args(_ansible_check_mode=True, _ansible_diff=True, _ansible_verbosity=3, secret=SECRET, env='C39_TASK_ENV')
    rc, stdout, stderr = de.run_module_here(fake_module, de.encode_arguments(args), {'C39_TASK_ENV': 'from environment:'})
    result = parsed(rc, stdout, stderr)
    assert rc == 0 and result['check'] is True and result['diff'] is True and result['verbosity'] == 3
    assert result['changed'] is False and result['env'] == 'from environment:'
    assert result['echo'] == 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER' and SECRET not in json.dumps(result, default=str), 'the module masks its no_log values'
    assert result['invocation']['module_args']['secret'] == 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'
    assert [warning_text(w) for w in result['warnings']] == ['a warning from the module']
    assert 'written by C code' in stderr and 'python stderr' in stderr and 'written by C code' not in stdout
    # what the run changed in this process is undone: environment, working directory, the module side's globals
    assert os.getcwd() == cwd and dict(os.environ) == environ_before and 'C39_TASK_ENV' not in os.environ
    assert basic._ANSIBLE_ARGS is None  # pylint: disable=protected-access


def test_a_failure_keeps_its_message_without_the_secret(fake_module):
    rc, stdout, stderr = de.run_module_here(fake_module, de.encode_arguments(internal_args(secret=SECRET, value='fail')), {})
    result = parsed(rc, stdout, stderr)
    assert rc == 1 and result['failed'] and result['msg'] == 'failed, the secret was ********'
    assert SECRET not in stdout + stderr


@pytest.mark.parametrize('tracebacks', [False, True])
def test_an_uncaught_exception_is_a_failed_result(fake_module, tracebacks):
    """What a module process gives: 2.19 the module side's error summary, its traceback only when the controller asked for
    it (_ansible_tracebacks_for); before 2.19 MODULE FAILURE with the traceback as ``exception`` (shown from -vvv)."""
    extra = {'_ansible_tracebacks_for': ['error'] if tracebacks else []} if PROFILES else {}
    rc, stdout, stderr = de.run_module_here(fake_module, de.encode_arguments(internal_args(value='raise', **extra)), {})
    result = parsed(rc, stdout, stderr)
    assert rc == 1 and result['failed'] is True
    if PROFILES:
        summary = str(result['exception'])
        assert 'an uncaught error' in summary and ('Traceback (most recent call last)' in summary) is tracebacks
    else:
        assert result['msg'].startswith('MODULE FAILURE')
        assert result['exception'].startswith('Traceback') and 'RuntimeError: an uncaught error' in result['exception']


def test_a_collection_module_runs_in_this_process():
    args = internal_args(_ansible_module_name='converge.virt.vm_info', uri='test:///default', name=['test'],
                         password=SECRET)
    rc, stdout, stderr = de.run_module_here(de.MODULES_PACKAGE + 'vm_info', de.encode_arguments(args), {})
    result = parsed(rc, stdout, stderr)
    assert rc == 0 and not result.get('failed'), (stdout, stderr)
    assert [vm['name'] for vm in result['vms']] == ['test'] and result['vms'][0]['power_state'] == 'RUNNING'
    assert result['invocation']['module_args']['password'] == 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'
    assert SECRET not in stdout + stderr


def test_a_collection_module_in_check_mode_with_diff():
    args = internal_args(_ansible_module_name='converge.virt.vm', _ansible_check_mode=True, _ansible_diff=True,
                         uri='test:///default', name='direct-new', state='stopped', memory='64MiB')
    rc, stdout, stderr = de.run_module_here(de.MODULES_PACKAGE + 'vm', de.encode_arguments(args), {})
    result = parsed(rc, stdout, stderr)
    assert rc == 0 and result['changed'] is True, (stdout, stderr)
    assert [step['action'] for step in result['steps']] == ['create']
    assert result['diff']['before']['vm_state'] == 'DELETED'
