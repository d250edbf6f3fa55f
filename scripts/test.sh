#!/usr/bin/env bash
# The test command (README's second set-up command; .ci/run calls exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
MEMSYS_TEST_TOOLS=1 bash scripts/bootstrap.sh
export MEMSYS_DATA_DIR="${MEMSYS_DATA_DIR:-$(cd .. && pwd)/shared/data}"
# lint first (seconds): style/imports (ruff) and the fixed/mutable line in the imports (import-linter)
.venv/bin/ruff check --quiet .
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
# one pytest-xdist worker per core (MEMSYS_TEST_WORKERS=0 runs in this process); tests that share a module
# fixture stay on one worker (xdist_group), and tests/conftest.py starts the slow ones first
exec .venv/bin/python -m pytest -q -n "${MEMSYS_TEST_WORKERS:-auto}" --dist loadgroup --durations=15 "$@"
