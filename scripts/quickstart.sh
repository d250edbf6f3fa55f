#!/usr/bin/env bash
# The main job on the embedded defaults (README's first set-up command).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export MEMSYS_DATA_DIR="${MEMSYS_DATA_DIR:-$(cd .. && pwd)/shared/data}"
exec .venv/bin/memsys quickstart "$@"
