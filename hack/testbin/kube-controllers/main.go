// Package main pins k8s.io/kubernetes in go.mod at the version kube-apiserver
// is built from (hack/testbin/kube-apiserver), so kube-controller-manager and
// kube-scheduler speak exactly its API. The binaries are built from the
// upstream commands, which the tool directive keeps in go.sum.
package main

func main() {}
