# syntax=docker/dockerfile:1
# The modelplane operator image: the Python package and helm, on a slim base,
# run as a non-root user and ready for a read-only root filesystem (every
# write goes to TMPDIR=/tmp, an emptyDir in deploy/chart).
#
#   docker build -t modelplane:0.1.0 .
#
# helm is built from the Go module hack/testbin/helm pins, with the ldflags
# hack/build-testbin.sh uses, so the image runs the very helm the integration
# tests run. Not built in CI: no container engine runs there.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# At least the `go` line of hack/testbin/helm/go.mod.
ARG GO_IMAGE=golang:1.24-bookworm

FROM ${GO_IMAGE} AS helm
WORKDIR /src
COPY hack/testbin/helm/go.mod hack/testbin/helm/go.sum hack/testbin/helm/main.go ./
# go.sum pins every module's checksum; the build fails on any mismatch.
RUN set -eu; \
    gomod() { awk -v m="$1" '($1 == "require" && $2 == m) { print $3; exit } ($1 == m && $2 ~ /^v/) { print $2; exit }' go.mod; }; \
    helm_version="$(gomod helm.sh/helm/v3)"; \
    k8s_minor="$(gomod k8s.io/client-go | cut -d. -f2)"; \
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${helm_version}"; \
    ldflags="${ldflags} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"; \
    for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do \
        ldflags="${ldflags} -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${k8s_minor}"; \
    done; \
    CGO_ENABLED=0 go build -trimpath -ldflags="${ldflags}" -o /out/helm helm.sh/helm/v3/cmd/helm; \
    test "$(/out/helm version --template '{{.Version}}')" = "${helm_version}"

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
# The versions hack/constraints.txt pins, as the tests ran them.
COPY hack/constraints.txt /tmp/constraints.txt
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-cache-dir --constraint /tmp/constraints.txt /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels /tmp/constraints.txt \
    && groupadd --gid 65532 modelplane \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp \
        --shell /usr/sbin/nologin modelplane
COPY --from=helm /out/helm /usr/local/bin/helm

# /tmp is the only path written: helm's homes (actions/helm.py puts them under
# a TMPDIR directory), each call's private kubeconfig, and client-go's cache
# under HOME.
ENV TMPDIR=/tmp \
    HOME=/tmp \
    MODELPLANE_HELM=/usr/local/bin/helm \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["modelplane"]
CMD ["run", "--all-namespaces", "--metrics-port", "8080"]
