# The two set-up commands of README.md's quick start:
#   make run    installs what the broker needs and runs it (embedded Redis, 127.0.0.1:9092)
#   make test   installs everything the tests need and runs the whole suite
# Both are idempotent. Pass broker flags with ARGS, e.g. `make run ARGS="--port 19092"`,
# and pytest arguments with PYTEST_ARGS.
#
#   make check  the fast tier while working: lint, types, and every test that needs no
#               broker, Redis, JVM or TLC, with the `dev` Hypothesis profile (about a minute)

ARGS ?=
PYTEST_ARGS ?=

.PHONY: run test check setup-run setup-test lint typecheck pytest spec-check

run: setup-run
	.venv/bin/korvet serve $(ARGS)

test: setup-test lint typecheck pytest

check: setup-test lint typecheck
	KORVET_HYPOTHESIS_PROFILE=dev scripts/pytest.sh -m "not integration" $(PYTEST_ARGS)

setup-run:
	@scripts/setup.sh run

setup-test:
	@scripts/setup.sh test

lint:
	.venv/bin/ruff check korvet tests
	.venv/bin/lint-imports

typecheck:
	.venv/bin/mypy

pytest:
	@scripts/pytest.sh $(PYTEST_ARGS)

spec-check: setup-test
	.venv/bin/korvet spec check
