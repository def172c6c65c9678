// Package main pins Envoy Gateway in go.mod for the simulated test cluster.
// `go install` of the upstream command fails (the proxy does not serve the
// sub-path as a module), so the binary is built from this module with
// `go build github.com/envoyproxy/gateway/cmd/envoy-gateway`; the tool
// directive keeps every package that command needs in go.sum.
package main

func main() {}
