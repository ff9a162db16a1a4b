// Command virt-controller is KubeVirt's own virt-controller main (kubevirt.io/kubevirt/cmd/virt-controller),
// built through this wrapper module (see ../../go.mod) to run out of cluster (`up --controllers real`).
// Copied from kubevirt.io/kubevirt cmd/virt-controller/virt-controller.go (Apache-2.0, The KubeVirt Authors).
package main

import (
	"kubevirt.io/kubevirt/pkg/virt-controller/watch"
)

func main() {
	watch.Execute()
}
