#!/usr/bin/env bash
# Make the operator image's two bases from Debian's packages, for a machine
# that reaches Debian's package mirror and the Go module proxy but no image
# registry (python:3.11-slim and golang:* cannot be pulled there):
#
#   localhost/modelplane-base-python:bookworm   Debian bookworm minbase with
#       python3 (3.11), python3-venv and ca-certificates: the Dockerfile's
#       PYTHON_IMAGE, for the stage that installs the package and the image itself
#   localhost/modelplane-base-go:<GO_VERSION>   minbase, ca-certificates and the
#       Go toolchain: the Dockerfile's GO_IMAGE, for the stage that builds helm
#
# Each is made with `mmdebstrap --variant=minbase` (as root; 1-2 min each) and
# imported with `podman import`. An image already carrying the label
# modelplane.base-inputs equal to this script's digest is kept, so a re-run
# with nothing changed costs one `podman image inspect` per base.
#
# The Go toolchain is not Debian's (bookworm's golang is 1.19; helm needs the
# `go` line of hack/testbin/helm/go.mod): it is Go's own release, fetched as
# the module golang.org/toolchain through the Go module proxy with the host's
# `go mod download`, which checks it against the checksum database.
#
#   bash hack/make-base.sh            make what is missing or stale
#   bash hack/make-base.sh --print    print the two image names and exit
#
# MODELPLANE_DEBIAN_MIRROR overrides the mirror (default deb.debian.org).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/hack/containers.conf}"

SUITE=bookworm
MIRROR="${MODELPLANE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Go's own toolchain for the helm stage; at least the `go` line of
# hack/testbin/helm/go.mod. The docker default in the Dockerfile
# (golang:1.26-bookworm) is the same minor.
GO_VERSION=1.26.11
PYTHON_BASE="localhost/modelplane-base-python:$SUITE"
GO_BASE="localhost/modelplane-base-go:$GO_VERSION"

say() { echo "make-base: $*"; }
die() { echo "make-base: error: $*" >&2; exit 1; }

case "${1:-}" in
    --print) echo "$PYTHON_BASE"; echo "$GO_BASE"; exit 0 ;;
    "") ;;
    *) die "unknown argument '$1' (expected --print)" ;;
esac

for tool in mmdebstrap podman; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found; install Debian's packages:" \
        "apt-get install podman buildah runc skopeo mmdebstrap uidmap fuse-overlayfs"
done
[[ $(id -u) == 0 ]] || die "mmdebstrap's root mode needs root (the bases are made once, as root)"

# The script itself and the mirror are what the bases are made from.
INPUTS="$( (cat "${BASH_SOURCE[0]}" "$ROOT/hack/containers.conf"; echo "$MIRROR") | sha256sum | cut -c1-16)"
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH

current() {  # image: whether it exists and was made from these inputs
    [[ "$(podman image inspect --format '{{ index .Labels "modelplane.base-inputs" }}' "$1" 2>/dev/null)" == "$INPUTS" ]]
}

# Documentation, manuals and translations are no use in an image (copyright
# files are kept: they are the packages' licences).
DPKG_OPTS=(
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
)

make_base() {  # image include-list [mmdebstrap hook options...]
    local image="$1" include="$2" start=$SECONDS log
    shift 2
    mkdir -p "$ROOT/build/image"
    log="$ROOT/build/image/mmdebstrap-${image##*/}.log"
    say "$image: mmdebstrap --variant=minbase $SUITE ($include) ..."
    # The package lists and apt's caches are dropped: a stage that needs a
    # package says so (apt-get update first), and the image stays small.
    # The merged-usr hook lays out /usr as bookworm's usrmerge package would,
    # without that package and the perl it pulls in (some 50 MB).
    mmdebstrap --quiet --variant=minbase --include="$include" "${DPKG_OPTS[@]}" \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
        "$@" "$SUITE" - "$MIRROR" 2>"$log" \
        | podman import --quiet \
            --change 'ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change "LABEL modelplane.base-inputs=$INPUTS" \
            --change 'CMD ["/bin/bash"]' \
            - "$image" >/dev/null \
        || { tail -n 30 "$log" >&2; die "$image: mmdebstrap or podman import failed (log: $log)"; }
    say "$image: made in $((SECONDS - start))s ($(podman image inspect --format '{{.Size}}' "$image") bytes)"
}

if current "$PYTHON_BASE"; then
    say "$PYTHON_BASE: up to date"
else
    make_base "$PYTHON_BASE" python3,python3-venv,ca-certificates
fi

if current "$GO_BASE"; then
    say "$GO_BASE: up to date"
else
    if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
        PATH="/usr/local/go/bin:$PATH"
    fi
    command -v go >/dev/null 2>&1 || die "'go' not found on PATH; it fetches the Go toolchain" \
        "for the helm stage (install Go from https://go.dev/dl/, as hack/build-testbin.sh needs too)"
    arch="$(go env GOARCH)"
    module="golang.org/toolchain@v0.0.1-go$GO_VERSION.linux-$arch"
    stage="$(mktemp -d)"
    trap 'rm -rf "$stage"' EXIT
    say "fetching Go $GO_VERSION ($module) through the Go module proxy"
    zip="$(cd "$stage" && GOFLAGS=-mod=mod go mod download -json "$module" \
        | sed -n 's/^[[:space:]]*"Zip": "\(.*\)",$/\1/p')"
    [[ -f "$zip" ]] || die "go mod download $module gave no zip"
    # The module's files sit under its own name; a toolchain switch makes
    # bin/ and pkg/tool/ executable afterwards (a module zip keeps no modes),
    # and so does this.
    python3 - "$zip" "$stage/go" "$module" <<'PY'
import sys, zipfile
from pathlib import Path
zip_path, dest, prefix = sys.argv[1], Path(sys.argv[2]), sys.argv[3] + "/"
with zipfile.ZipFile(zip_path) as z:
    for info in z.infolist():
        name = info.filename
        if not name.startswith(prefix) or ".." in Path(name).parts:
            raise SystemExit(f"unexpected entry {name!r} in {zip_path}")
        rel = name[len(prefix):]
        if not rel or name.endswith("/"):
            continue
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(z.read(info))
        top = rel.split("/")
        out.chmod(0o755 if top[0] == "bin" or top[:2] == ["pkg", "tool"] else 0o644)
PY
    make_base "$GO_BASE" ca-certificates \
        --customize-hook="cp -a '$stage/go' \"\$1/usr/local/go\"" \
        --customize-hook='chroot "$1" /usr/local/go/bin/go version'
fi
