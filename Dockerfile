# syntax=docker/dockerfile:1
# The modelplane operator image: the Python package in a virtualenv and helm,
# on a Debian bookworm Python 3.11 base, run as uid 65532 and ready for a
# read-only root filesystem (every write goes to TMPDIR=/tmp, an emptyDir in
# deploy/chart).
#
#   docker build -t modelplane:0.1.0 .         with the registry bases below
#   bash hack/build-image.sh                   podman/buildah, with bases made
#                                              from Debian's packages (hack/make-base.sh)
#
# The same file serves both: the bases are build arguments, and each only
# needs a Python 3.11 with the venv module (PYTHON_IMAGE) or a Go toolchain
# (GO_IMAGE) on a Debian userland.
#
# helm is built from the Go module hack/testbin/helm pins, with the ldflags
# hack/build-testbin.sh uses, so the image runs the helm version the
# integration tests run.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# At least the `go` line of hack/testbin/helm/go.mod.
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${GO_IMAGE} AS helm
WORKDIR /src
COPY hack/testbin/helm/go.mod hack/testbin/helm/go.sum hack/testbin/helm/main.go ./
# go.sum pins every module's checksum; the build fails on any mismatch. The
# base's own toolchain builds (no switch to another one mid-build). The
# ca-bundle secret, when given (hack/build-image.sh gives the host's), is the
# trust store while modules are fetched; it is in no layer.
RUN --mount=type=secret,id=ca-bundle,target=/etc/ssl/certs/ca-certificates.crt \
    set -eu; \
    export GOTOOLCHAIN=local GOFLAGS=-mod=readonly; \
    gomod() { awk -v m="$1" '($1 == "require" && $2 == m) { print $3; exit } ($1 == m && $2 ~ /^v/) { print $2; exit }' go.mod; }; \
    helm_version="$(gomod helm.sh/helm/v3)"; \
    k8s_minor="$(gomod k8s.io/client-go | cut -d. -f2)"; \
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${helm_version}"; \
    ldflags="${ldflags} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"; \
    for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do \
        ldflags="${ldflags} -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${k8s_minor}"; \
    done; \
    CGO_ENABLED=0 go build -trimpath -ldflags="${ldflags}" -o /out/helm helm.sh/helm/v3/cmd/helm; \
    test "$(/out/helm version --template '{{.Version}}')" = "${helm_version}"; \
    rm -rf "$(go env GOMODCACHE)" "$(go env GOCACHE)"

FROM ${PYTHON_IMAGE} AS venv
WORKDIR /src
# The versions hack/constraints.txt pins, as the tests ran them, into a
# virtualenv the final stage copies whole: pip and its build never reach the
# image. The venv's python is the base's, at the same path in both stages.
# Every file pip fetches must have a hash hack/image-requirements.txt lists
# (hack/lock-image.py writes it from constraints.txt), wheels only, so no
# build runs with dependencies of its own; the package is then built from
# the tree with the build backend just installed, with no index at all.
COPY hack/image-requirements.txt /tmp/requirements.txt
COPY pyproject.toml ./
COPY src ./src
# pyproject.toml names README.md as the long description, which the image
# has no use for: an empty one keeps a docs edit from rebuilding this stage.
RUN : >README.md
RUN --mount=type=secret,id=ca-bundle,target=/etc/ssl/certs/ca-certificates.crt \
    python3 -m venv /opt/modelplane \
    && /opt/modelplane/bin/pip install --no-cache-dir --disable-pip-version-check \
        --cert /etc/ssl/certs/ca-certificates.crt \
        --require-hashes --only-binary=:all: --requirement /tmp/requirements.txt \
    && /opt/modelplane/bin/pip install --no-cache-dir --disable-pip-version-check \
        --no-index --no-deps --no-build-isolation . \
    && /opt/modelplane/bin/pip check \
    && /opt/modelplane/bin/pip uninstall --yes --quiet pip setuptools \
    && rm -f /opt/modelplane/bin/activate*

FROM ${PYTHON_IMAGE}
# No useradd (a minbase has none): the entry is what it would write.
RUN echo 'modelplane:x:65532:65532::/tmp:/usr/sbin/nologin' >>/etc/passwd \
    && echo 'modelplane:x:65532:' >>/etc/group
COPY --from=venv /opt/modelplane /opt/modelplane
COPY --from=helm /out/helm /usr/local/bin/helm

# /tmp is the only path written: helm's homes (actions/helm.py puts them under
# a TMPDIR directory), each call's private kubeconfig, and client-go's cache
# under HOME. The package's bytecode was compiled at install, so nothing is
# written beside it.
ENV PATH=/opt/modelplane/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    TMPDIR=/tmp \
    HOME=/tmp \
    MODELPLANE_HELM=/usr/local/bin/helm \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# /metrics over HTTPS to callers the hub authorizes; the probes in plain HTTP.
EXPOSE 8443 8081
ENTRYPOINT ["modelplane"]
CMD ["run", "--all-namespaces", "--metrics-port", "8443", "--health-port", "8081"]
