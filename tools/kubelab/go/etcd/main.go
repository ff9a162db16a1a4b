// Command etcd is etcd's own server main (go.etcd.io/etcd/server/v3), built
// through this wrapper module because the server module's go.mod has local
// replace lines that do not apply to a `go install` from outside.
// Copied from go.etcd.io/etcd/server/v3 main.go (Apache-2.0, The etcd Authors).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
