# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hypothesis settings of the phase property tests (``@settings(settings.get_profile('converge-phase'))``).

`make mutation` (CONVERGE_HYPOTHESIS_PROFILE=mutation) runs them derandomized, so that a mutant is judged the same
way every time, and with fewer examples, so that a mutant the table tests let through costs seconds, not minutes.
"""

import os

from hypothesis import settings

if os.environ.get('CONVERGE_HYPOTHESIS_PROFILE') == 'mutation':
    settings.register_profile('converge-phase', max_examples=60, derandomize=True, database=None, deadline=None, print_blob=False)
else:
    settings.register_profile('converge-phase', max_examples=400, deadline=None)
