# The two set-up commands of README.md's quick start:
#   make run    installs what the broker needs and runs it (embedded Redis, 127.0.0.1:9092)
#   make test   installs everything the tests need and runs the whole suite
# Both are idempotent. Pass broker flags with ARGS, e.g. `make run ARGS="--port 19092"`,
# and pytest arguments with PYTEST_ARGS.

ARGS ?=
PYTEST_ARGS ?=

.PHONY: run test setup-run setup-test lint typecheck pytest spec-check

run: setup-run
	.venv/bin/korvet serve $(ARGS)

test: setup-test lint typecheck pytest

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
