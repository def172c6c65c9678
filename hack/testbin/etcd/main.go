// Package main builds etcd for the integration tests. etcd's own modules
// carry replace directives to sibling paths, so `go install` of the server
// module fails; wrapping etcdmain in a module of ours builds the same binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
