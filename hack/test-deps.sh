#!/usr/bin/env bash
# What the tests need beyond the venv, built or installed once and cached;
# the test command runs this itself (tests/conftest.py) before any
# integration test, and a warm run takes a second or two.
#
#   1. the integration-test binaries (hack/build-testbin.sh: kube-apiserver,
#      etcd, helm), the simulated cluster's controllers
#      (hack/build-controllers.sh) and the simulated fleet's server
#      (hack/build-fleet-server.sh), from their Go modules into
#      ~/.cache/modelplane/testbin; a cold build needs Go (on PATH or in
#      /usr/local/go) and takes about twenty minutes on two cores;
#   2. promtool and prometheus on PATH (the chart's alert rules are tested
#      with them): when missing, as root with apt-get, Debian's prometheus
#      package; otherwise it stops and says how;
#   3. docker-registry, skopeo and htpasswd on PATH (the mirror preflight's
#      loopback registry): when missing, as root with apt-get, Debian's
#      docker-registry, skopeo and apache2-utils; otherwise it stops and says how;
#   4. with --image: podman & co. the same way, and the operator image
#      (hack/build-image.sh: bases from Debian's packages, then the
#      Dockerfile; rebuilt only when an input changed), for
#      tests/integration/test_image.py.
#
#   bash hack/test-deps.sh [--image]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { echo "test-deps: $*"; }
die() { echo "test-deps: error: $*" >&2; exit 1; }

image=0
for arg in "$@"; do
    case "$arg" in
        --image) image=1 ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *) die "unknown argument '$arg' (expected --image or --help)" ;;
    esac
done

# ---- 1. the integration-test binaries ---------------------------------------

say "building integration-test binaries"
"$ROOT/hack/build-testbin.sh"
say "building the simulated cluster's controllers"
"$ROOT/hack/build-controllers.sh"
# The simulated fleet's server (bench/fleet_server), for its test and the fleet benchmark.
"$ROOT/hack/build-fleet-server.sh" >/dev/null

# ---- 2. promtool and prometheus ---------------------------------------------

have_prometheus() { command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; }
if ! have_prometheus; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian's prometheus package (promtool and prometheus, for the alert tests)"
        apt_install() {
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus
        }
        # A fresh machine may have no package lists yet.
        apt_install >/dev/null || { apt-get update -q >/dev/null && apt_install >/dev/null; } \
            || die "apt-get could not install the prometheus package"
        say "installed $(dpkg-query -W -f='${Package} ${Version}' prometheus)"
    else
        die "promtool and prometheus are not on PATH; the alert-rule tests need both: install" \
            "them (as root: 'apt-get install --no-install-recommends prometheus'), then re-run" \
            "the tests"
    fi
fi
have_prometheus || die "the prometheus package is installed but promtool or prometheus is not on PATH"
say "promtool: $(command -v promtool) ($(promtool --version 2>&1 | head -n 1))"

# ---- 3. a loopback image registry ------------------------------------------

# tests/integration/test_mirror_registry.py runs a real registry on loopback
# (Debian's docker-registry), copies images into it with skopeo and makes
# its htpasswd file with htpasswd (apache2-utils); tests/registry.py starts it.
REGISTRY_PACKAGES=(docker-registry skopeo apache2-utils)
REGISTRY_TOOLS=(docker-registry skopeo htpasswd)
have_registry_tools() {
    local t
    for t in "${REGISTRY_TOOLS[@]}"; do command -v "$t" >/dev/null 2>&1 || return 1; done
}
if ! have_registry_tools; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian's ${REGISTRY_PACKAGES[*]} (the mirror preflight's registry)"
        registry_install() {
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                "${REGISTRY_PACKAGES[@]}"
        }
        registry_install >/dev/null || { apt-get update -q >/dev/null && registry_install >/dev/null; } \
            || die "apt-get could not install ${REGISTRY_PACKAGES[*]}"
    else
        die "the mirror tests need ${REGISTRY_TOOLS[*]} on PATH: install them (as root:" \
            "'apt-get install --no-install-recommends ${REGISTRY_PACKAGES[*]}'), then re-run" \
            "the tests"
    fi
fi
have_registry_tools || die "the registry packages are installed but one of ${REGISTRY_TOOLS[*]} is not on PATH"
say "docker-registry: $(docker-registry --version 2>&1 | head -n 1)"

[[ $image == 1 ]] || { say "done"; exit 0; }

# ---- 4. the operator image --------------------------------------------------

# tests/integration/test_image.py runs the operator image as deploy/chart runs
# it, with podman. The tools come from Debian's packages (runc because crun
# refuses mixed cgroups; hack/containers.conf says so); the bases are made
# from Debian's packages too, since no image registry need be reachable.
IMAGE_PACKAGES=(podman buildah runc skopeo mmdebstrap uidmap fuse-overlayfs)
IMAGE_TOOLS=(podman buildah runc skopeo mmdebstrap newuidmap fuse-overlayfs)
have_image_tools() {
    local t
    for t in "${IMAGE_TOOLS[@]}"; do command -v "$t" >/dev/null 2>&1 || return 1; done
}
if ! have_image_tools; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian's ${IMAGE_PACKAGES[*]} (to build and run the operator image)"
        image_install() {
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${IMAGE_PACKAGES[@]}"
        }
        image_install >/dev/null || { apt-get update -q >/dev/null && image_install >/dev/null; } \
            || die "apt-get could not install ${IMAGE_PACKAGES[*]}"
        say "installed $(dpkg-query -W -f='${Package} ${Version}, ' "${IMAGE_PACKAGES[@]}" | sed 's/, $//')"
    else
        die "the image test needs ${IMAGE_TOOLS[*]} on PATH: install them (as root:" \
            "'apt-get install ${IMAGE_PACKAGES[*]}'), then re-run the tests"
    fi
fi
have_image_tools || die "the image packages are installed but one of ${IMAGE_TOOLS[*]} is not on PATH"
say "podman: $(podman --version), $(runc --version | head -n 1)"
# Cached: a re-run with no input changed costs a digest and two image inspects.
"$ROOT/hack/build-image.sh"

say "done"
