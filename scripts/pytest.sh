#!/usr/bin/env bash
# Runs the test suite. pytest exits 5 when it collected no test; for the project's
# test command that is a failure (a suite that runs nothing proves nothing), so say so.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# Three workers (KORVET_TEST_WORKERS; 0 runs in this process), chosen on the project's 2-core
# machine: most integration tests wait on brokers and timers, so with two workers the cores
# were idle about a quarter of `make test` (user+sys 1,353 s of CPU in 885 s, set-up
# included); a third worker fills them. Two full runs took 663 and 651 s of pytest with
# three workers, against 701-801 s with two in the session before. `--dist loadfile` keeps a test
# file on one worker (its module-scoped brokers start once), and `--no-loadscope-reorder`
# hands files out longest first, as tests/conftest.py orders them, instead of by their
# number of tests.
workers="${KORVET_TEST_WORKERS:-3}"
if [ "$workers" = "0" ]; then
    .venv/bin/python -m pytest "$@"
else
    .venv/bin/python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
fi
code=$?
echo "test suite wall time: $(( $(date +%s) - start )) s" >&2
if [ "$code" -eq 5 ]; then
    echo "pytest collected no tests: treating that as a failure" >&2
    exit 1
fi
exit "$code"
