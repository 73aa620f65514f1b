#!/usr/bin/env bash
# ansible-test sanity on the collection, the suite every Galaxy collection is held to, or (with
# --units) ansible-test units, which runs the collection's unit tests under tests/unit/.
#
# ansible-test wants the collection at <dir>/ansible_collections/<namespace>/<name>. Sanity runs on
# what Galaxy and Automation Hub receive: the tarball `ansible-galaxy collection build` makes of
# this checkout, installed with `ansible-galaxy collection install` into a temporary collections
# path, with the sanity ignores it ships (tests/sanity/ignore-*.txt; galaxy.yml's build_ignore
# leaves the rest of tests/ out). The unit tests are not shipped, so --units lays out a copy of
# the checkout instead (files git tracks or would track, less build_ignore, plus tests/). Each sanity test
# gets its own virtual environment (--venv, reused from ~/.ansible/test/venv on later runs)
# with its pinned linters installed from the package index. The unit tests run in one venv
# kept at ~/.ansible/test/venv/specbench-units/python3.11 (ansible-test's own --venv would
# live inside the temporary copy and be built again on every run), into which ansible-test
# installs its pytest and plugins and tests/unit/requirements.txt.
#
# Usage: tests/sanity/run.sh [ansible-test sanity options], e.g. --test pylint, or
#        tests/sanity/run.sh --units [ansible-test units options], e.g. tests/unit/plugins/modules;
#        --keep leaves the copy (its path is printed) for a closer look.
# Needs: .venv from the README's setup (ansible-core's ansible-test), python3.11 with
# ensurepip, and the package index (PyPI) reachable. Nothing else from the internet.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
export PATH="$root/.venv/bin:$PATH"
export PYTHONDONTWRITEBYTECODE=1

if [ ! -x .venv/bin/ansible-test ]; then
  echo "tests/sanity/run.sh: no .venv/bin/ansible-test; build the venv first (.ci/run, or the README's setup)" >&2
  exit 2
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "tests/sanity/run.sh: $root is not a git work tree; the files to test are the ones git lists, so run it in a clone" >&2
  exit 2
fi

keep=0
command=sanity
args=()
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    --units) command=units ;;
    *) args+=("$arg") ;;
  esac
done

# ansible-test bootstraps pip into each new venv by running a get-pip script it downloads
# from ci-files.testing.ansible.com into this cache; that host is not reachable from
# everywhere the suite runs. Stand in a script that does the same job with what Python and
# the package index provide: ensurepip, then the exact pip version ansible-test asked for.
# It receives get-pip's arguments (pip options, pip==<version>, --no-setuptools/--no-wheel).
# Written only when missing or when it is an older copy of ours; a real get-pip script
# that is already cached is left alone.
pip_version=$(python - <<'EOF'
from ansible_test._internal.python_requirements import get_venv_packages
from ansible_test._internal.host_configs import NativePythonConfig
print(get_venv_packages(NativePythonConfig(version="3.11", path="python3.11"))["pip"])
EOF
)
get_pip="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
marker="# specbench: offline stand-in for get-pip"
want=$(cat <<EOF
$marker (written by tests/sanity/run.sh)
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
sys.exit(subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=False).returncode)
EOF
)
if [ ! -e "$get_pip" ] || { head -n1 "$get_pip" | grep -qF "$marker" && [ "$(cat "$get_pip")" != "$want" ]; }; then
  mkdir -p "$(dirname "$get_pip")"
  printf '%s\n' "$want" >"$get_pip.tmp"
  mv "$get_pip.tmp" "$get_pip"
  echo "== sanity: wrote pip $pip_version bootstrap $get_pip"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/specbench-$command.XXXXXX")
if [ "$keep" -eq 0 ]; then trap 'rm -rf "$tmp"' EXIT; fi
if [ "$command" = sanity ]; then
  # The built collection, installed as a user installs it (no dependencies: sanity needs none).
  ansible-galaxy collection build --output-path "$tmp/build" "$root" >"$tmp/build.log" 2>&1 \
    || { cat "$tmp/build.log" >&2; echo "tests/sanity/run.sh: ansible-galaxy collection build failed" >&2; exit 2; }
  tarball=$(ls "$tmp"/build/specbench-core-*.tar.gz)
  ansible-galaxy collection install --no-deps --force -p "$tmp" "$tarball" >"$tmp/install.log" 2>&1 \
    || { cat "$tmp/install.log" >&2; echo "tests/sanity/run.sh: ansible-galaxy collection install failed" >&2; exit 2; }
  dest="$tmp/ansible_collections/specbench/core"
  shipped=$(cd "$dest" && find tests/sanity -maxdepth 1 -name 'ignore-*.txt' 2>/dev/null | sort | tr '\n' ' ' || true)
  shipped=${shipped% }
  echo "== sanity: on the built collection $(basename "$tarball"), installed at $dest (ignores shipped: ${shipped:-none})"
else
  # The unit tests: tracked plus untracked-not-ignored files, less galaxy.yml's build_ignore
  # (which drops the venv links, collections/ and its link back to this root, results, .ci),
  # plus tests/, which the tarball leaves out but ansible-test units reads (tests/unit/).
  dest="$tmp/ansible_collections/specbench/core"
  mkdir -p "$dest"
  git ls-files -z --cached --others --exclude-standard | python -c '
import fnmatch, os, sys, yaml
ignore = [pat for pat in yaml.safe_load(open("galaxy.yml"))["build_ignore"] if not pat.startswith("tests")]
for path in sys.stdin.read().split("\0"):
    if not path or not os.path.lexists(path):
        continue  # deleted in the work tree, not yet in the index
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    if not any(fnmatch.fnmatch(p, pat) for p in prefixes for pat in ignore):
        sys.stdout.write(path + "\0")
' | tar -c --null -T - -f - | tar -x -f - -C "$dest"
fi
[ "$keep" -eq 1 ] && echo "== $command: copy kept at $dest"

echo "== ansible-test $command ($(ansible-test --version))"
cd "$dest"
start=$SECONDS
rc=0
if [ "$command" = units ]; then
  # One venv for every run, built from python3.11 (ensurepip gives it pip, so ansible-test needs no
  # get-pip); --requirements has ansible-test install its units requirements, ansible-core's for the
  # controller tests (tests/unit/plugins/action) and tests/unit/requirements.txt, which a warm venv
  # already holds. Locked: two checkouts on one machine share it.
  venv="$HOME/.ansible/test/venv/specbench-units/python3.11"
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9
  if [ ! -e "$venv/.specbench-made" ]; then # none yet, or one cut off while it was made
    rm -rf "$venv"
    python3.11 -m venv "$venv"
    touch "$venv/.specbench-made"
    echo "== units: made the venv $venv"
  fi
  ansible-test units --python 3.11 --python-interpreter "$venv/bin/python" --requirements --color no "${args[@]}" || rc=$?
  echo "== units: exit $rc after $((SECONDS - start)) s (tests/unit, in $venv)"
else
  ansible-test sanity --venv --python 3.11 --color no "${args[@]}" || rc=$?
  echo "== sanity: exit $rc after $((SECONDS - start)) s (the built collection; ignores: ${shipped:-none shipped})"
fi
exit $rc
