#!/usr/bin/env bash
# Build the operator image with podman (buildah) from the Dockerfile, on the
# bases hack/make-base.sh makes from Debian's packages, check its size
# against a budget and write what is in it to build/image/inventory.txt.
#
#   bash hack/build-image.sh           build when an input changed (else seconds)
#   bash hack/build-image.sh --check   exit 0 if the image is built from the
#                                      current inputs, 1 (saying so) if not
#   bash hack/build-image.sh --print   print the image name and exit
#
# The inputs are what the Dockerfile copies (.dockerignore lets nothing else
# in), the Dockerfile, the podman config and both bases' image IDs; their
# digest is the image's label modelplane.inputs. A cold build (bases, helm from
# source, the package's dependencies from PyPI) takes minutes; the measured times
# are in docs/image.md.
#
# PYTHON_IMAGE and GO_IMAGE, when set, are used as the bases instead (no
# mmdebstrap then). MODELPLANE_IMAGE_BUDGET_MB overrides the size budget.
# docker builds the same Dockerfile with its registry bases:
#   docker build -t modelplane:0.1.0 .
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/hack/containers.conf}"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/pyproject.toml" | head -n 1)"
IMAGE="localhost/modelplane:$VERSION"
# The image measured 318 MB (the venv 137 MB, botocore, grpc and
# cryptography the largest in it; helm 59 MB; the base 129 MB), plus room for
# a dependency or two: a bigger one is a change to look at.
BUDGET_MB="${MODELPLANE_IMAGE_BUDGET_MB:-400}"
OUT="$ROOT/build/image"

say() { echo "build-image: $*"; }
die() { echo "build-image: error: $*" >&2; exit 1; }

mode=build
case "${1:-}" in
    --check) mode=check ;;
    --print) echo "$IMAGE"; exit 0 ;;
    "") ;;
    *) die "unknown argument '$1' (expected --check or --print)" ;;
esac

command -v podman >/dev/null 2>&1 || die "'podman' not found; install Debian's packages:" \
    "apt-get install podman buildah runc skopeo mmdebstrap uidmap fuse-overlayfs"

if [[ -z "${PYTHON_IMAGE:-}" || -z "${GO_IMAGE:-}" ]]; then
    { read -r default_python; read -r default_go; } < <(bash "$ROOT/hack/make-base.sh" --print)
    PYTHON_IMAGE="${PYTHON_IMAGE:-$default_python}" GO_IMAGE="${GO_IMAGE:-$default_go}"
    [[ $mode == check ]] || bash "$ROOT/hack/make-base.sh"
fi

image_id() { podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || echo missing; }

inputs() {
    cd "$ROOT"
    {
        printf '%s\n' "$PYTHON_IMAGE $(image_id "$PYTHON_IMAGE")" "$GO_IMAGE $(image_id "$GO_IMAGE")"
        find Dockerfile .dockerignore pyproject.toml hack/image-requirements.txt hack/containers.conf \
            hack/testbin/helm/go.mod hack/testbin/helm/go.sum hack/testbin/helm/main.go src \
            -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 \
            | LC_ALL=C sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
}
DIGEST="$(inputs)"
built="$(podman image inspect --format '{{ index .Labels "modelplane.inputs" }}' "$IMAGE" 2>/dev/null || true)"

if [[ $mode == check ]]; then
    [[ "$built" == "$DIGEST" ]] && exit 0
    if [[ -z "$built" ]]; then
        echo "build-image: $IMAGE is not built; run 'bash hack/build-image.sh' (or hack/setup.sh)" >&2
    else
        echo "build-image: $IMAGE was built from other inputs than the tree's; rebuild it with" \
            "'bash hack/build-image.sh' (or hack/setup.sh)" >&2
    fi
    exit 1
fi

if [[ "$built" == "$DIGEST" && -s "$OUT/inventory.txt" ]]; then
    say "$IMAGE is up to date with its inputs ($DIGEST); nothing to build"
    exit 0
fi

# The host's trusted CAs reach the stages that fetch (Go modules, PyPI) as
# a build secret, so a machine behind a TLS-inspecting egress proxy builds
# too, and no layer of the image keeps them.
secret=()
ca_bundle="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
[[ -f "$ca_bundle" ]] && secret=(--secret "id=ca-bundle,src=$ca_bundle")

say "building $IMAGE on $PYTHON_IMAGE and $GO_IMAGE (inputs $DIGEST)"
previous="$(image_id "$IMAGE")"
start=$SECONDS
podman build --network host --pull=never --layers \
    --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" --build-arg "GO_IMAGE=$GO_IMAGE" \
    "${secret[@]}" --label "modelplane.inputs=$DIGEST" \
    --tag "$IMAGE" --file "$ROOT/Dockerfile" "$ROOT"
say "built in $((SECONDS - start))s"
# The build it replaces, now untagged (only that one: other dangling images
# are not this script's to remove). Its layers the new one shares stay.
if [[ "$previous" != missing && "$previous" != "$(image_id "$IMAGE")" ]]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
fi

size="$(podman image inspect --format '{{.Size}}' "$IMAGE")"
size_mb=$(( (size + 999999) / 1000000 ))
say "$IMAGE: $size_mb MB (budget $BUDGET_MB MB)"

# What is inside, as the image itself reports it: its system packages, its
# Python and packages, helm.
mkdir -p "$OUT"
run() { podman run --rm --network none --read-only --user 65532 --entrypoint "$1" "$IMAGE" "${@:2}"; }
{
    echo "# $IMAGE ($(podman image inspect --format '{{.Id}}' "$IMAGE" | cut -c1-12)), $size bytes"
    echo "# made by hack/build-image.sh from inputs $DIGEST on $PYTHON_IMAGE and $GO_IMAGE"
    echo
    echo "## helm"
    run helm version --template '{{.Version}} ({{.GoVersion}}){{"\n"}}'
    echo
    echo "## Python packages (/opt/modelplane)"
    run python -c 'import importlib.metadata as m, platform
print("python", platform.python_version())
for d in sorted(m.distributions(), key=lambda d: d.metadata["Name"].lower()):
    print(d.metadata["Name"], d.version)'
    echo
    echo "## System packages (dpkg)"
    run dpkg-query --show --showformat '${Package} ${Version}\n'
} >"$OUT/inventory.txt.tmp"
mv -f "$OUT/inventory.txt.tmp" "$OUT/inventory.txt"
say "wrote $OUT/inventory.txt"

(( size_mb <= BUDGET_MB )) || die "$IMAGE is $size_mb MB, over its budget of $BUDGET_MB MB" \
    "(build/image/inventory.txt lists what is in it); shrink it, or raise the budget in" \
    "hack/build-image.sh and say why"
