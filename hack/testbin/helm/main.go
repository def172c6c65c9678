// Package main pins helm in go.mod; the binary is built from the upstream
// command with `go build helm.sh/helm/v3/cmd/helm`.
package main

import _ "helm.sh/helm/v3/pkg/action"

func main() {}
