#!/usr/bin/env bash
# Build the simulated cluster's controllers into the cache hack/build-testbin.sh
# uses (${MODELPLANE_TESTBIN_CACHE:-$HOME/.cache/modelplane/testbin}), one
# directory per version, so a new pin never reuses an old binary:
#
#   <TESTBIN_KEY>/kube-controller-manager, kube-scheduler  (the k8s.io/kubernetes
#                                     module kube-apiserver is built from)
#   kwok-<v>/kwok                     sigs.k8s.io/kwok/cmd/kwok, go install-style
#   trust-manager-<v>/trust-manager   github.com/cert-manager/trust-manager/cmd/trust-manager
#   envoy-gateway-<v>/envoy-gateway   from hack/testbin/envoy-gateway (go install of
#                                     the sub-path fails: the proxy does not serve
#                                     it as a module)
#
# Versions are named once, in tests/testenv/controllers.py; this script
# reads them there and checks the go.mod pins agree.  Binaries already present
# are kept, so a warm run takes well under a second.  If $MODELPLANE_TESTBIN
# holds all five (and kwok's stages.yaml), nothing is built.  Up to
# MODELPLANE_BUILD_JOBS builds (default: the core count, at most 2) run at
# once, sharing one Go build and module cache.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESTBIN_SRC="$ROOT/hack/testbin"
PY_CONSTANTS="$ROOT/tests/testenv/controllers.py"

say() { echo "build-controllers: $*"; }
die() { echo "build-controllers: error: $*" >&2; exit 1; }

const() {  # NAME [FILE] -> the string value of NAME = "..." in FILE (controllers.py)
    local v file="${2:-$PY_CONSTANTS}"
    v="$(sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$file")"
    [[ -n "$v" ]] || die "could not read $1 from $file"
    echo "$v"
}
gomod_version() {  # module-dir module -> required version
    awk -v m="$2" '($1 == "require" && $2 == m) { print $3; exit }
                   ($1 == m && $2 ~ /^v/)         { print $2; exit }' "$TESTBIN_SRC/$1/go.mod"
}

# As for the other binaries, $MODELPLANE_TESTBIN holding them all means nothing to build.
if [[ -n "${MODELPLANE_TESTBIN:-}" ]]; then
    all=1
    for b in kube-controller-manager kube-scheduler kwok trust-manager envoy-gateway; do
        [[ -x "$MODELPLANE_TESTBIN/$b" ]] || all=0
    done
    if [[ $all == 1 && -s "$MODELPLANE_TESTBIN/stages.yaml" ]]; then
        say "using MODELPLANE_TESTBIN=$MODELPLANE_TESTBIN; nothing to build"
        exit 0
    fi
fi

TESTBIN_KEY="$(sed -n 's/^TESTBIN_KEY = "\(.*\)"$/\1/p' "$ROOT/tests/testenv/env.py")"
[[ -n "$TESTBIN_KEY" ]] || die "could not read TESTBIN_KEY from tests/testenv/env.py"
KWOK_VERSION="$(const KWOK_VERSION)"
# The catalog's own pin: the simulated cluster runs the version Managed mode installs.
TRUST_MANAGER_VERSION="$(const VERSION "$ROOT/src/modelplane/catalog/components/trust_manager.py")"
ENVOY_GATEWAY_VERSION="$(const ENVOY_GATEWAY_VERSION)"
K8S_VERSION="$(gomod_version kube-controllers k8s.io/kubernetes)"
[[ "$(gomod_version envoy-gateway github.com/envoyproxy/gateway)" == "$ENVOY_GATEWAY_VERSION" ]] \
    || die "hack/testbin/envoy-gateway/go.mod does not pin $ENVOY_GATEWAY_VERSION ($PY_CONSTANTS)"
[[ "$K8S_VERSION" == "$(gomod_version kube-apiserver k8s.io/kubernetes)" ]] \
    || die "hack/testbin/kube-controllers and kube-apiserver pin different k8s.io/kubernetes"

CACHE="${MODELPLANE_TESTBIN_CACHE:-$HOME/.cache/modelplane/testbin}"
KUBE_DIR="$CACHE/$TESTBIN_KEY"
KWOK_DIR="$CACHE/kwok-$KWOK_VERSION"
TM_DIR="$CACHE/trust-manager-$TRUST_MANAGER_VERSION"
EG_DIR="$CACHE/envoy-gateway-$ENVOY_GATEWAY_VERSION"

todo=()
[[ -x "$KUBE_DIR/kube-controller-manager" ]] || todo+=(kube-controller-manager)
[[ -x "$KUBE_DIR/kube-scheduler" ]] || todo+=(kube-scheduler)
[[ -x "$KWOK_DIR/kwok" && -s "$KWOK_DIR/stages.yaml" ]] || todo+=(kwok)
[[ -x "$TM_DIR/trust-manager" ]] || todo+=(trust-manager)
[[ -x "$EG_DIR/envoy-gateway" ]] || todo+=(envoy-gateway)
if [[ ${#todo[@]} == 0 ]]; then
    say "all present under $CACHE; nothing to build"
    exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || die "'go' not found on PATH; install Go (https://go.dev/dl/) and re-run"
mkdir -p "$KUBE_DIR" "$KWOK_DIR" "$TM_DIR" "$EG_DIR"
LOGS="$(mktemp -d)"
trap 'rm -rf "$LOGS"' EXIT
say "building ${todo[*]} with $(go version) (a cold build takes minutes each; logs in $LOGS)"

# Same -X flags as kube-apiserver (hack/build-testbin.sh), so every component
# reports the version it is.
k8s_minor="$(cut -d. -f2 <<<"$K8S_VERSION")"
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1"
    kube_ldflags+=" -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done

# kwok acts only through its Stage objects, and its binary embeds none: take
# the "fast" node and pod lifecycle and the lease heartbeat that kwokctl uses
# (kustomize/stage/fast at the same tag) from the module just downloaded.
kwok_stages() {
    local src tmp="$KWOK_DIR/.stages.yaml.tmp.$$" f
    src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
        [[ -s "$src/$f" ]] || { echo "kwok stage $src/$f missing" >&2; rm -f "$tmp"; return 1; }
        { echo "---"; cat "$src/$f"; } >>"$tmp"
    done
    mv -f "$tmp" "$KWOK_DIR/stages.yaml"
}

build_one() {  # name -> builds into its directory via a temporary file
    local name="$1" start=$SECONDS tmp
    case "$name" in
        kube-controller-manager|kube-scheduler)
            tmp="$KUBE_DIR/.$name.tmp.$$"
            (cd "$TESTBIN_SRC/kube-controllers" &&
                go build -trimpath -ldflags="$kube_ldflags" -o "$tmp" "k8s.io/kubernetes/cmd/$name") ;;
        envoy-gateway)
            tmp="$EG_DIR/.$name.tmp.$$"
            (cd "$TESTBIN_SRC/envoy-gateway" &&
                go build -trimpath -o "$tmp" github.com/envoyproxy/gateway/cmd/envoy-gateway) ;;
        kwok|trust-manager)
            # go install-style: the module's own go.mod decides every dependency.
            local gobin pkg dir
            gobin="$(mktemp -d)"
            if [[ $name == kwok ]]; then
                pkg="sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" dir="$KWOK_DIR"
            else
                pkg="github.com/cert-manager/trust-manager/cmd/trust-manager@$TRUST_MANAGER_VERSION" dir="$TM_DIR"
            fi
            tmp="$dir/.$name.tmp.$$"
            local rc=0
            GOBIN="$gobin" go install -trimpath "$pkg" && mv -f "$gobin/$name" "$tmp" &&
                { [[ $name != kwok ]] || kwok_stages; } || rc=$?
            rm -rf "$gobin"
            (exit $rc) ;;
    esac || { rm -f "$tmp"; return 1; }
    mv -f "$tmp" "$(dirname "$tmp")/$name"
    say "$name: built in $((SECONDS - start))s"
}

jobs_max="${MODELPLANE_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
(( jobs_max > 2 )) && jobs_max=2
(( jobs_max < 1 )) && jobs_max=1
build_dir() {
    case "$1" in
        kube-*) echo "$KUBE_DIR" ;; kwok) echo "$KWOK_DIR" ;;
        trust-manager) echo "$TM_DIR" ;; envoy-gateway) echo "$EG_DIR" ;;
    esac
}
for name in "${todo[@]}"; do
    while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n || true; done
    say "$name: building ..."
    build_one "$name" >"$LOGS/$name.log" 2>&1 &
done
wait || true

failed=()
for name in "${todo[@]}"; do
    if [[ -x "$(build_dir "$name")/$name" ]]; then
        grep -h 'built in' "$LOGS/$name.log" || true
    else
        echo "build-controllers: $name failed; the end of its log:" >&2
        tail -n 40 "$LOGS/$name.log" >&2
        failed+=("$name")
    fi
done
(( ${#failed[@]} == 0 )) || die "could not build: ${failed[*]}"
say "done: $CACHE"
