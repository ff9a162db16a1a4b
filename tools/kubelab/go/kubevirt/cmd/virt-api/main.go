// Command virt-api is KubeVirt's own virt-api main (kubevirt.io/kubevirt/cmd/virt-api),
// built through this wrapper module (see ../../go.mod) to run out of cluster (stage 2).
// Copied from kubevirt.io/kubevirt cmd/virt-api/virt-api.go (Apache-2.0, The KubeVirt Authors).
package main

import (
	klog "kubevirt.io/client-go/log"

	"kubevirt.io/kubevirt/pkg/service"
	virt_api "kubevirt.io/kubevirt/pkg/virt-api"
)

func main() {
	klog.InitializeLogging("virt-api")

	app := virt_api.NewVirtApi()
	service.Setup(app)
	app.Execute()
}
