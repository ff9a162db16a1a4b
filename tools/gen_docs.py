"""Regenerate docs/states.md from the phase tables (run by `make docs`)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    sys.path.insert(0, os.path.join(ROOT, 'build', 'collections'))
    sys.path.insert(0, HERE)
    from states_doc import render_states_markdown  # pylint: disable=import-outside-toplevel
    with open(os.path.join(ROOT, 'docs', 'states.md'), 'w', encoding='utf-8') as handle:
        handle.write(render_states_markdown())


if __name__ == '__main__':
    main()
