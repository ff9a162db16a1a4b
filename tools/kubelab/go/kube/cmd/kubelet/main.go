// Command kubelet is Kubernetes' own kubelet main (k8s.io/kubernetes/cmd/kubelet), built through this wrapper
// module (see ../../go.mod); it runs the lab's real node (`up --nodes real`, docs/kubelab.md).
// Copied from k8s.io/kubernetes cmd/kubelet/kubelet.go (Apache-2.0, The Kubernetes Authors).
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // for client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	command := app.NewKubeletCommand(context.Background())
	code := cli.Run(command)
	os.Exit(code)
}
