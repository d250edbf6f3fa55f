#!/usr/bin/env bash
# The test command (README's second set-up command; .ci/run calls exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export MEMSYS_DATA_DIR="${MEMSYS_DATA_DIR:-$(cd .. && pwd)/shared/data}"
# lint first (seconds): style/imports (ruff) and the fixed/mutable line in the imports (import-linter)
.venv/bin/ruff check --quiet .
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest -q "$@"
