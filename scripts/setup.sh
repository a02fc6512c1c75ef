#!/usr/bin/env bash
# Idempotent set-up behind `make run` and `make test`.
#
#   scripts/setup.sh run    the virtualenv with the broker, and redis-server
#   scripts/setup.sh test   all of the above plus test tools, kcat, Java, and the
#                           pinned JVM jars from Maven Central
#
# Each step checks first and does nothing when its work is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-run}"
python="${PYTHON:-python3}"

say() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo "$@"
    else
        say "need root to run: $*"
        say "install it by hand, then run this again"
        exit 1
    fi
}

apt_updated=""
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        say "missing $* and no apt-get here: install $* yourself"
        exit 1
    fi
    if [ -z "$apt_updated" ]; then
        say "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    say "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_redis() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        apt_install redis-server redis-tools
    fi
    # The broker checks the version again at start; this catches an old system Redis early.
    local major
    major=$(redis-server --version | sed -E 's/.* v=([0-9]+)\..*/\1/')
    if [ "${major:-0}" -lt 7 ]; then
        say "redis-server $(redis-server --version) is older than 7; Korvet needs Redis >= 7"
        exit 1
    fi
}

ensure_test_packages() {
    local missing=()
    command -v kcat >/dev/null 2>&1 || missing+=(kcat)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)  # certificates of the security tests
    command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}

ensure_venv() {
    local extras="$1"
    if [ ! -x .venv/bin/python ]; then
        say "creating .venv with $($python --version)"
        "$python" -m venv .venv
    fi
    # Reinstall only when the dependency list or the requested extras change.
    local want
    want="$(sha256sum pyproject.toml | cut -c1-16)-${extras:-none}"
    local stamp=".venv/.korvet-installed"
    if [ -f "$stamp" ] && grep -qx -- "$want" "$stamp" 2>/dev/null; then
        return
    fi
    # A test install covers the run install, so a later `make run` does not reinstall.
    if [ -z "$extras" ] && [ -f "$stamp" ] && grep -q -- "$(sha256sum pyproject.toml | cut -c1-16)-" "$stamp"; then
        return
    fi
    local target="."
    [ -n "$extras" ] && target=".[$extras]"
    say "pip install -e '$target'"
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e "$target"
    echo "$want" > "$stamp"
}

ensure_jars() {
    for set in "$@"; do
        .venv/bin/korvet jars fetch "$set"
    done
}

case "$mode" in
    run)
        ensure_redis
        ensure_venv ""
        ;;
    test)
        ensure_redis
        ensure_test_packages
        ensure_venv "test,spark"
        ensure_jars $(.venv/bin/korvet jars list)
        ;;
    *)
        say "usage: scripts/setup.sh run|test"
        exit 2
        ;;
esac
