#!/usr/bin/env bash
# Build the simulated fleet's server (bench/fleet_server, Go, standard library
# only) into the cache the test binaries use, named by a hash of its source,
# so a changed source never reuses an old binary:
#
#   ${MODELPLANE_TESTBIN_CACHE:-$HOME/.cache/modelplane/testbin}/fleet-server-<hash>/fleet_server
#
# A warm run (the binary there already) builds nothing. Prints the binary's path.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/bench/fleet_server"
say() { echo "build-fleet-server: $*" >&2; }

# The official Go tarball installs to /usr/local/go, which a clean shell's
# PATH lacks (hack/build-testbin.sh looks there too).
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { say "error: go not found on PATH nor in /usr/local/go"; exit 1; }
HASH="$(cat "$SRC/go.mod" "$SRC"/*.go | sha256sum | cut -c1-16)"
DEST="${MODELPLANE_TESTBIN_CACHE:-$HOME/.cache/modelplane/testbin}/fleet-server-$HASH"
if [[ ! -x "$DEST/fleet_server" ]]; then
    say "building $DEST/fleet_server"
    mkdir -p "$DEST"
    CACHE="${MODELPLANE_TESTBIN_CACHE:-$HOME/.cache/modelplane/testbin}/.gocache"
    (cd "$SRC" && GOCACHE="$CACHE/build" GOFLAGS=-trimpath CGO_ENABLED=0 \
        go build -o "$DEST/fleet_server.tmp" .)
    mv "$DEST/fleet_server.tmp" "$DEST/fleet_server"
fi
echo "$DEST/fleet_server"
