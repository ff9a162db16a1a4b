"""Offline stand-in for ansible-test's get-pip bootstrap script.

ansible-test creates one virtual environment per sanity test and bootstraps pip
into it with a script it downloads from its own CI file host, which this
machine cannot reach. `make sanity` copies this file to the cache path
ansible-test looks in first (~/.ansible/test/cache/get_pip_<version>.py): it
installs pip from the standard library's bundled wheel (ensurepip) and then
the pinned packages ansible-test asks for, from PyPI, with that pip.
"""

import subprocess
import sys


def main():
    # in a child process: ensurepip points PIP_CONFIG_FILE at /dev/null in its own environment,
    # which would hide the machine's pip configuration (index, CA bundle) from the install below
    subprocess.check_call([sys.executable, '-m', 'ensurepip', '--upgrade'])
    packages = [arg for arg in sys.argv[1:] if arg not in ('--no-setuptools', '--no-wheel')]
    subprocess.check_call([sys.executable, '-m', 'pip', 'install', '--disable-pip-version-check', '-q'] + packages)


if __name__ == '__main__':
    main()
