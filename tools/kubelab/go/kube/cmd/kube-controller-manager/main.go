// Command kube-controller-manager is Kubernetes' own kube-controller-manager main (k8s.io/kubernetes/cmd/kube-controller-manager),
// built through this wrapper module (see ../../go.mod).
// Copied from k8s.io/kubernetes cmd/kube-controller-manager/controller-manager.go (Apache-2.0, The Kubernetes Authors).
package main

import (
	"os"
	_ "time/tzdata" // for CronJob Time Zone support

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugin
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
