"""The harness: how checks are registered, given a context, run, excused and reported.

``registry`` (checks and their discovery), ``outcomes`` (how a check fails or is
skipped), ``context`` (what a check gets), ``runner`` (threads, time limits, a broker
that dies), ``report`` and ``catalogue`` (terminal, JSON, HTML, JUnit, Markdown),
``profile`` (an implementation's excused differences), ``brokers`` (the broker under
test, started or only reached), ``drivers`` (real clients), ``security`` (the secured
listener of the security checks) and ``pytest_plugin``.

It stands on the client floor (``korvet.conformance.kafka``) and imports no mode and no
check: the checks are found at run time (``registry.load_checks``).
"""
