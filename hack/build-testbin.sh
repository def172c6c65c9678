#!/usr/bin/env bash
# Build the integration-test binaries (kube-apiserver, etcd, helm) from the Go
# modules under hack/testbin into a cache outside the repository:
#
#   ${MODELPLANE_TESTBIN_CACHE:-$HOME/.cache/modelplane/testbin}/<TESTBIN_KEY>/
#
# TESTBIN_KEY is defined once, in tests/testenv/env.py (the runtime
# resolves the same directory); this script checks it agrees with the versions
# pinned in the hack/testbin go.mod files.  Binaries already present are kept.
# If $MODELPLANE_TESTBIN names a directory holding all three, nothing is built.
#
# `python -m tests.testenv bin` prints the resolved directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESTBIN_SRC="$ROOT/hack/testbin"
BINS=(etcd helm kube-apiserver)

say() { echo "build-testbin: $*"; }
die() { echo "build-testbin: error: $*" >&2; exit 1; }

has_all() {
    local dir="$1" b
    for b in "${BINS[@]}"; do [[ -x "$dir/$b" ]] || return 1; done
}

if [[ -n "${MODELPLANE_TESTBIN:-}" ]]; then
    if has_all "$MODELPLANE_TESTBIN"; then
        say "using MODELPLANE_TESTBIN=$MODELPLANE_TESTBIN (holds ${BINS[*]}); nothing to build"
        exit 0
    fi
    say "MODELPLANE_TESTBIN=$MODELPLANE_TESTBIN does not hold all of ${BINS[*]}; using the cache"
fi

KEY="$(sed -n 's/^TESTBIN_KEY = "\(.*\)"$/\1/p' "$ROOT/tests/testenv/env.py")"
[[ -n "$KEY" ]] || die "could not read TESTBIN_KEY from tests/testenv/env.py"

# The version of module $2 required by hack/testbin/$1/go.mod.
gomod_version() {
    awk -v m="$2" '($1 == "require" && $2 == m) { print $3; exit }
                   ($1 == m && $2 ~ /^v/)         { print $2; exit }' "$TESTBIN_SRC/$1/go.mod"
}
K8S_VERSION="$(gomod_version kube-apiserver k8s.io/kubernetes)"
HELM_VERSION="$(gomod_version helm helm.sh/helm/v3)"
DERIVED="k8s-$K8S_VERSION"
DERIVED+="_etcd-$(gomod_version etcd go.etcd.io/etcd/server/v3)"
DERIVED+="_helm-$HELM_VERSION"
[[ "$DERIVED" == "$KEY" ]] || die "hack/testbin go.mod files pin $DERIVED but" \
    "tests/testenv/env.py has TESTBIN_KEY = \"$KEY\"; update TESTBIN_KEY"

DEST="${MODELPLANE_TESTBIN_CACHE:-$HOME/.cache/modelplane/testbin}/$KEY"
if has_all "$DEST"; then
    say "all binaries present in $DEST; nothing to build"
    exit 0
fi

# The official Go tarball installs to /usr/local/go, which a clean shell's
# PATH does not name; look there before giving up.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || die "'go' not found on PATH; install Go (https://go.dev/dl/," \
    ">= the 'go' line of hack/testbin/*/go.mod) and re-run, or point MODELPLANE_TESTBIN" \
    "at a directory holding ${BINS[*]}"

mkdir -p "$DEST"
say "building into $DEST with $(go version)"

build() {  # name module-dir package [ldflags]
    local name="$1" dir="$TESTBIN_SRC/$2" pkg="$3" ldflags="${4:-}" tmp start
    if [[ -x "$DEST/$name" ]]; then
        say "$name: present, skipping"
        return
    fi
    if [[ ! -s "$dir/go.sum" ]]; then
        say "$name: go.sum missing, running 'go mod tidy' in hack/testbin/$2"
        (cd "$dir" && go mod tidy)
    fi
    tmp="$DEST/.$name.tmp.$$"
    start=$SECONDS
    say "$name: go build $pkg (a cold build takes minutes) ..."
    (cd "$dir" && go build -ldflags="$ldflags" -o "$tmp" "$pkg") || { rm -f "$tmp"; die "$name: build failed"; }
    mv -f "$tmp" "$DEST/$name"
    say "$name: built in $((SECONDS - start))s"
}

# Without these -X flags (set by the upstream Makefiles) kube-apiserver reports
# /version as v0.0.0-master, which fails charts' kubeVersion constraints, and
# helm reports v3.19 with Kubernetes 1.20 default capabilities.
k8s_minor="$(cut -d. -f2 <<<"$K8S_VERSION")"
kas_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kas_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1"
    kas_ldflags+=" -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done
helm_k8s_minor="$(gomod_version helm k8s.io/client-go | cut -d. -f2)"
helm_ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
helm_ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$helm_k8s_minor"
done

build etcd etcd .
build helm helm helm.sh/helm/v3/cmd/helm "$helm_ldflags"
build kube-apiserver kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kas_ldflags"

has_all "$DEST" || die "some binaries are still missing from $DEST"
say "done: $DEST"
