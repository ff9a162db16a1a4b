// Command kube-scheduler is Kubernetes' own kube-scheduler main (k8s.io/kubernetes/cmd/kube-scheduler),
// built through this wrapper module (see ../../go.mod); it places KubeVirt's launcher pods on kwok's nodes
// (`up --controllers real`).
// Copied from k8s.io/kubernetes cmd/kube-scheduler/scheduler.go (Apache-2.0, The Kubernetes Authors).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
