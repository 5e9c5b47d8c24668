// Command etcd is upstream's etcd server, built from the Go module proxy at the
// version go.mod pins (hack/tools.sh --e2e): the local control plane's store.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
