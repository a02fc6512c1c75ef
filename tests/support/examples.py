"""Hypothesis example counts from the active profile (tests/conftest.py registers them).

``examples(weight)`` is the profile's ``max_examples`` times ``weight``: a law that is
cheap and wide asks for more (weight 3), one that drives a real Redis per example for
fewer (weight 0.4). The profile, not the test, decides the scale: ``dev`` for a quick
local run, ``ci`` for the test suite, ``deep`` for an overnight regression run
(``KORVET_HYPOTHESIS_PROFILE=deep make test``).
"""

from __future__ import annotations

from hypothesis import settings


def examples(weight: float = 1.0) -> int:
    return max(1, round(settings().max_examples * weight))
