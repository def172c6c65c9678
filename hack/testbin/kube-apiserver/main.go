// Package main builds the upstream kube-apiserver for the integration tests.
// The blank import pins k8s.io/kubernetes in go.mod; the real entry point is
// the upstream command, built with `go build k8s.io/kubernetes/cmd/kube-apiserver`.
package main

import _ "k8s.io/kubernetes/cmd/kube-apiserver/app"

func main() {}
