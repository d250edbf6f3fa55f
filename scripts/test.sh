#!/usr/bin/env bash
# The test command (README's second set-up command; .ci/run calls exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
MEMSYS_TEST_TOOLS=1 bash scripts/bootstrap.sh
export MEMSYS_DATA_DIR="${MEMSYS_DATA_DIR:-$(cd .. && pwd)/shared/data}"
# lint first (seconds): style/imports (ruff) and the fixed/mutable line in the imports (import-linter)
.venv/bin/ruff check --quiet .
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
# pytest-xdist workers: one more than the cores, because a quarter of the CPU sat idle with one per core
# (tests wait on sandboxes, servers, Ray and timeouts); MEMSYS_TEST_WORKERS=0 runs in this process. Tests
# that share a module fixture stay on one worker (xdist_group); tests/conftest.py starts the slow ones first
workers="${MEMSYS_TEST_WORKERS:-$(( $(nproc) + 1 ))}"
# one torch/BLAS thread per worker: with as many workers as cores, more threads only contend
if [ "$workers" != 0 ]; then export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"; fi
exec .venv/bin/python -m pytest -q -n "$workers" --dist loadgroup --durations=15 "$@"
