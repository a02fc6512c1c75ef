"""How a check ends other than by passing: it failed, or it could not run here.

A check fails by raising ``CheckFailed`` (the broker did not behave as the check
asserts) or by letting the client floor's ``KafkaCallFailed`` through (an operation it
called could not go on). ``CheckFailed`` is a ``KafkaCallFailed``, so the runner and
``CheckContext.step`` catch the one and report both alike: the check failed, with the
message and details. ``CheckSkipped`` says the check cannot run against this broker or on
this machine (a missing tool, say).
"""

from __future__ import annotations

from korvet.conformance.kafka.session import KafkaCallFailed


class CheckFailed(KafkaCallFailed):
    """The broker did not behave as the check asserts. ``details`` go to the reports."""


class CheckSkipped(Exception):
    """The check cannot run against this broker or on this machine (a missing tool, say)."""
