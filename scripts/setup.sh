#!/usr/bin/env bash
# Idempotent set-up behind `make run` and `make test`.
#
#   scripts/setup.sh run    the virtualenv with the broker, and redis-server
#   scripts/setup.sh test   all of the above plus test tools, kcat, Java, Maven, the
#                           pinned JVM jars (resolved by Maven), kfake-server (franz-go's
#                           kfake, from the Go module proxy at the versions scripts/kfake/go.mod
#                           pins, checked against go.sum), and a wheelhouse for the tests that
#                           install Korvet into a fresh virtualenv without the network
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
    # `korvet jars fetch` resolves the pinned jars with Maven (settings.xml and ~/.m2 apply)
    command -v mvn >/dev/null 2>&1 || missing+=(maven)
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
    if [ "$extras" = "server" ] && [ -f "$stamp" ] && grep -q -- "$(sha256sum pyproject.toml | cut -c1-16)-" "$stamp"; then
        return
    fi
    local target="."
    [ -n "$extras" ] && target=".[$extras]"
    say "pip install -e '$target'"
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e "$target"
    echo "$want" > "$stamp"
}

ensure_go() {
    if ! command -v go >/dev/null 2>&1; then
        apt_install golang-go
    fi
}

# kfake-server (scripts/kfake): built again only when its sources or pins change.
ensure_kfake() {
    local want stamp=".kfake/.built"
    want="$(cat scripts/kfake/main.go scripts/kfake/go.mod scripts/kfake/go.sum | sha256sum | cut -c1-16)"
    if [ -x .kfake/kfake-server ] && [ -f "$stamp" ] && grep -qx -- "$want" "$stamp"; then
        return
    fi
    ensure_go
    say "building kfake-server (franz-go's kfake, pinned in scripts/kfake/go.mod)"
    mkdir -p .kfake
    # -mod=readonly: the build uses exactly the versions of go.mod and fails if a hash in go.sum
    # does not match what the module proxy serves. A Go older than go.mod's line fetches the
    # toolchain it names (GOTOOLCHAIN=auto, Go >= 1.21).
    (cd scripts/kfake && GOFLAGS=-mod=readonly GOTOOLCHAIN=auto go build -trimpath -o ../../.kfake/kfake-server .)
    echo "$want" > "$stamp"
}

# Wheels of korvet's base, its server and conformance extras and the build backend, so that
# tests install the suite (tests/conformance/test_kafka_conformance.py) or the broker
# (tests/integration/test_packaging.py) into a fresh virtualenv without the network.
ensure_wheelhouse() {
    local want stamp=".wheelhouse/.downloaded"
    want="$(sha256sum pyproject.toml | cut -c1-16)"
    if [ -f "$stamp" ] && grep -qx -- "$want" "$stamp"; then
        return
    fi
    say "pip download korvet's dependencies into .wheelhouse"
    rm -rf .wheelhouse && mkdir -p .wheelhouse
    .venv/bin/python -m pip download -q -d .wheelhouse --only-binary=:all: \
        $(.venv/bin/python scripts/requirements.py server conformance) setuptools==84.2.1 wheel
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
        ensure_venv "server"
        ;;
    test)
        ensure_redis
        ensure_test_packages
        ensure_venv "test,spark"
        ensure_jars $(.venv/bin/korvet jars list)
        ensure_kfake
        ensure_wheelhouse
        ;;
    *)
        say "usage: scripts/setup.sh run|test"
        exit 2
        ;;
esac
