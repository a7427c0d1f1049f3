# Shared set-up of bin/bazel and bin/tensorboard (sourced, not run): installs Bazel if
# missing and creates or reuses the virtual environment with the pinned requirements, keyed by
# their hash and shared by every clone on this machine.

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache_dir=${INCEPTION_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inception}

say() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }

install_bazel() {
  command -v bazel >/dev/null 2>&1 && return 0
  say "Bazel not found; installing Debian's bazel-bootstrap (one time)..."
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  if ! command -v apt-get >/dev/null 2>&1; then
    say "error: no apt-get here; install Bazel 4.2 or newer yourself and rerun."
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q bazel-bootstrap >/dev/null \
    || { $sudo apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
           $sudo apt-get install -y -q bazel-bootstrap >/dev/null; }
}

has_nvidia_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}

ensure_venv() {
  local flavour=cpu extra=()
  if has_nvidia_gpu; then
    flavour=cuda
    extra=("tensorflow[and-cuda]==$(sed -n 's/^tensorflow==//p' "$repo_root/requirements.txt")")
  fi
  local key
  key=$( (cat "$repo_root/requirements.txt"; echo "$flavour"; python3 --version) | sha256sum | cut -c1-16)
  venv_dir="$cache_dir/venv-$flavour-$key"
  mkdir -p "$cache_dir"
  exec 9>"$venv_dir.lock"
  flock 9
  if [[ ! -f $venv_dir/.complete ]]; then
    say "creating the Python environment $venv_dir ($flavour; a few minutes, one time)..."
    rm -rf "$venv_dir"
    python3 -m venv "$venv_dir"
    "$venv_dir/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    "$venv_dir/bin/python" -m pip install -q --disable-pip-version-check \
      -r "$repo_root/requirements.txt" "${extra[@]}"
    touch "$venv_dir/.complete"
  fi
  flock -u 9
}


# After `bazel test`: one line per test target whose log says tests were skipped (unittest's
# "OK (skipped=N)"), with the first reason given, so that no skip passes silently.
# What the tests of a real scheduler need beside Python: Debian's Slurm and munge, installed as
# root when missing (tests/slurm_lab.py runs its own daemons, with files of its own; nothing
# here is started or configured). Without root the Slurm test reports itself skipped.
ensure_test_tools() {
  [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1 || return 0
  command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 && return 0
  say "installing Debian's slurm-wlm and munge for the Slurm test (one time)..."
  local install=(apt-get install -y -q --no-install-recommends slurm-wlm munge)
  DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive "${install[@]}" \
           >/dev/null 2>&1; } \
    || say "could not install slurm-wlm and munge: the Slurm test will say so"
}

report_skipped_tests() {
  local logs="$repo_root/bazel-testlogs" log target count reason
  [[ -d $logs ]] || return 0
  while IFS= read -r log; do
    count=$(grep -oE '^(OK|FAILED) \(.*skipped=[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1) \
      || true
    [[ -n $count ]] || continue
    target="//$(dirname "${log#"$logs"/}" | sed 's#/shard_[0-9]*_of_[0-9]*$##; s#/\([^/]*\)$#:\1#')"
    reason=$(grep -oE "skipped '[^']*'" "$log" | head -1 | sed "s/^skipped '//; s/'$//") || true
    say "$target: $count test(s) skipped${reason:+ ($reason)}"
  done < <(find -L "$logs" -name test.log 2>/dev/null | sort)
}
