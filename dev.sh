#!/usr/bin/env bash
# Fieldscope's one-command set-up.
#
#   ./dev.sh run    set everything up, then open the desktop app on the built-in demo
#   ./dev.sh test   set everything up, then run the whole test suite
#   ./dev.sh setup  set everything up only
#
# "Everything" is: the Debian packages the app and its GUI tests need (apt, as root or
# through sudo; skipped when all are present), a virtual environment in .venv with
# Fieldscope installed in editable mode with its test tools. Re-running is cheap: each
# step is skipped when it is already done. Set PYTHON to choose the interpreter (3.11+).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.fieldscope-installed

# Runtime libraries for Qt's xcb platform and Mesa's software OpenGL, plus Xvfb for
# the GUI tests (pytest-xvfb starts it). Alternatives separated by '|' cover Debian
# releases that renamed a package; the first one apt knows is used.
DEBIAN_PACKAGES=(
  xvfb xauth
  libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libxcb-image0 libxcb-render-util0
  libxcb-xinerama0 libxcb-randr0 libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0 libxkbcommon0
  libgl1 libegl1 libgl1-mesa-dri libfontconfig1 libdbus-1-3
  desktop-file-utils
  "libglib2.0-0t64|libglib2.0-0"
)

say() { printf '[dev.sh] %s\n' "$*"; }

is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

system_deps() {
  if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    say "not a Debian-like system: install Xvfb, Mesa and Qt's xcb libraries yourself"
    return 0
  fi
  local want=() missing=() alt name updated=0
  if ! "$PYTHON" -c "import ensurepip, venv" >/dev/null 2>&1; then want+=("python3-venv"); fi
  for alt in "${DEBIAN_PACKAGES[@]}"; do
    IFS='|' read -r -a names <<<"$alt"
    local found=""
    for name in "${names[@]}"; do
      if is_installed "$name"; then found=installed; break; fi
    done
    [ -n "$found" ] && continue
    want+=("$alt")
  done
  [ ${#want[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      say "missing Debian packages (${want[*]}) and not root; install them, then re-run"; return 1
    fi
  fi
  say "installing Debian packages: ${want[*]}"
  $sudo apt-get update -qq
  for alt in "${want[@]}"; do
    IFS='|' read -r -a names <<<"$alt"
    for name in "${names[@]}"; do
      if apt-cache show "$name" >/dev/null 2>&1; then missing+=("$name"); break; fi
    done
  done
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

python_env() {
  if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    say "$PYTHON is $("$PYTHON" --version 2>&1); Fieldscope needs Python 3.11 or newer (set PYTHON=...)"
    return 1
  fi
  if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ] && [ -x "$VENV/bin/fieldscope" ]; then return 0; fi
  [ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
  say "installing Fieldscope and its dependencies into $VENV (first time: a few minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e ".[test]"
  touch "$STAMP"
}

run_tests() {
  # TensorFlow tests and GUI/OpenGL tests run in separate pytest processes: on these
  # machines TensorFlow and Mesa's software OpenGL crash when they share a process.
  local py="$VENV/bin/python" status=0
  # The architecture is checked first, in seconds: pyflakes and import order (ruff), and the
  # import contracts of pyproject.toml (import-linter: only core.engine imports TensorFlow,
  # core never imports Qt, app never imports TensorFlow or core.engine).
  say "lint: ruff, import contracts"
  "$VENV/bin/ruff" check . || status=$?
  "$VENV/bin/lint-imports" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
  # A worker process that crashes (a signal) fails its test and ends the set at once
  # (--max-worker-restart=0): with --dist loadfile, pytest-xdist 3.8's replacement of a crashed
  # worker can wait for ever (its issues 784 and 1378; a Qt test's segfault hung a CI here,
  # 2026-12-07), and otherwise it runs the crashing test again in each replacement.
  # The numerical tests run in one pytest worker process per core (at most 4; FIELDSCOPE_TEST_WORKERS
  # sets another number, 0 runs them in this process), a test file to a worker: most of their time
  # is single-threaded (TensorFlow's import, XLA's compiler, the engine subprocesses' start-up), and a
  # file's tests share its compiled programs.
  # A process that compiles XLA programs keeps every one of them (TensorFlow's compilation cache is
  # never evicted, and each engine run's programs are new), so a worker's memory grows with every
  # in-process run it makes: over all of tests/core one worker reached ~11 GiB and the machine ran
  # out (runs refused for want of memory, 2026-12-05), and over tests/core/engine alone the two
  # workers reached 13 and 9 GiB of 24 (2026-12-06: a check's fresh process beside them timed out,
  # an engine run was refused). So the tests run in sets of workers, one set after the other: the
  # engine's tests that start processes of their own (logical devices, signals) while the machine
  # is empty, then the engine's other tests in two halves, then the rest.
  local workers=${FIELDSCOPE_TEST_WORKERS:-$(n=$(nproc 2>/dev/null || echo 1); echo $(( n < 4 ? n : 4 )))}
  say "tests: numerical core (TensorFlow) and the benchmarks' measures ($workers worker processes)"
  local own=(tests/core/engine/test_chain_devices.py tests/core/engine/test_chain_devices_resumed.py
             tests/core/engine/test_sharded_density.py tests/core/engine/test_sharded_fft.py
             tests/core/engine/test_sharded_run.py tests/core/engine/test_sharded_memory.py
             tests/core/engine/test_engine_signals.py)
  local rest=() f
  for f in tests/core/engine/test_*.py; do
    [[ " ${own[*]} " == *" $f "* ]] || rest+=("$f")
  done
  local half=$(( (${#rest[@]} + 1) / 2 ))
  local set
  for set in "${own[*]}" "${rest[*]:0:$half}" "${rest[*]:$half}"; do
    # shellcheck disable=SC2086  # a set is a list of file names without spaces
    "$py" -m pytest $set -p no:xvfb -q --durations=12 -n "$workers" --dist loadfile --max-worker-restart=0 "$@" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
  done
  "$py" -m pytest tests/core tests/bench tests/test_file_budget.py --ignore=tests/core/engine -p no:xvfb -q --durations=12 -n "$workers" --dist loadfile --max-worker-restart=0 "$@" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
  say "tests: application (Qt, no TensorFlow in the test processes; $workers worker processes)"
  # The Qt tests spend much of their time waiting on engine processes and timers: in a worker
  # process per core (each with its own Xvfb), a test file to a worker, they took 375 s where one
  # process took 573 s (2026-12-06, 2 cores).
  # A crash of a Qt process (a signal) ends its output with every thread's stack, the GUI
  # thread's last; CI keeps only the start and the end of a long log, so that stack is said
  # again at the very end.
  local log; log=$(mktemp)
  rc=0
  "$py" -m pytest tests/app -q --durations=12 -n "$workers" --dist loadfile --max-worker-restart=0 "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  # (a worker's crash, which xdist reports as a failed test, prints the same stacks)
  if [ "$rc" -ge 128 ] || grep -q '^Fatal Python error' "$log"; then
    say "a Qt test process crashed (exit status $rc); where its GUI thread was:"
    awk '/^(Current thread|Thread .*most recent call first)/ { block = "" } { block = block $0 "\n" }
         /^Current thread/ { current = 1 } current && /^$/ { printf "%s", block; exit }' "$log" | tail -40
  fi
  rm -f "$log"
  [ "$rc" -eq 0 ] || [ "$status" -ne 0 ] || status=$rc
  return "$status"
}

case "${1:-}" in
  setup) system_deps; python_env ;;
  run) system_deps; python_env; shift; exec "$VENV/bin/fieldscope" gui --demo "$@" ;;
  test) system_deps; python_env; shift; run_tests "$@" ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
