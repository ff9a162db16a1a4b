// Command kubevirt-manifests prints, as a YAML stream, objects that KubeVirt's
// and CDI's own Go code generates, so that no schema is ever written by hand:
//
//	kubevirt-manifests crds      every CRD virt-operator installs (and the KubeVirt CRD
//	                             of the operator's own manifest), then every CRD of CDI
//	kubevirt-manifests virt-api  virt-api's webhook configurations and APIServices for
//	                             the install namespace given by -namespace
//	kubevirt-manifests rbac      virt-api's ServiceAccount, ClusterRole, Role and bindings as
//	                             virt-operator installs them (GetAllApiServer) in that namespace
//	kubevirt-manifests handler-rbac  virt-handler's, as virt-operator installs them (GetAllHandler)
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	cdiresources "kubevirt.io/containerized-data-importer/pkg/operator/resources"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/rbac"
)

// The list of install/strategy.go GenerateCurrentInstallStrategy, plus the
// KubeVirt CRD itself (shipped in kubevirt-operator.yaml).
var kubevirtCRDs = []func() (*extv1.CustomResourceDefinition, error){
	components.NewKubeVirtCrd,
	components.NewVirtualMachineInstanceCrd, components.NewPresetCrd, components.NewReplicaSetCrd,
	components.NewVirtualMachineCrd, components.NewVirtualMachineInstanceMigrationCrd,
	components.NewVirtualMachineSnapshotCrd, components.NewVirtualMachineSnapshotContentCrd,
	components.NewVirtualMachineRestoreCrd, components.NewVirtualMachineInstancetypeCrd,
	components.NewVirtualMachineClusterInstancetypeCrd, components.NewVirtualMachinePoolCrd,
	components.NewMigrationPolicyCrd, components.NewVirtualMachinePreferenceCrd,
	components.NewVirtualMachineClusterPreferenceCrd, components.NewVirtualMachineExportCrd,
	components.NewVirtualMachineCloneCrd, components.NewVirtualMachineBackupCrd,
	components.NewVirtualMachineBackupTrackerCrd,
}

func emit(obj interface{}) {
	out, err := yaml.Marshal(obj)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print("---\n", string(out))
}

func crds() {
	for _, f := range kubevirtCRDs {
		crd, err := f()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		crd.APIVersion, crd.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
		emit(crd)
	}
	names := make([]string, 0, len(cdiresources.CDICRDs))
	for name := range cdiresources.CDICRDs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Print("---\n", strings.TrimPrefix(cdiresources.CDICRDs[name], "---\n"))
		if !strings.HasSuffix(cdiresources.CDICRDs[name], "\n") {
			fmt.Println()
		}
	}
}

func virtAPI(namespace string) {
	mutating := components.NewVirtAPIMutatingWebhookConfiguration(namespace)
	mutating.APIVersion, mutating.Kind = "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"
	emit(mutating)
	validating := components.NewVirtAPIValidatingWebhookConfiguration(namespace)
	validating.APIVersion, validating.Kind = "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"
	emit(validating)
	for _, svc := range components.NewVirtAPIAPIServices(namespace) {
		svc.APIVersion, svc.Kind = "apiregistration.k8s.io/v1", "APIService"
		emit(svc)
	}
}

func apiServerRBAC(namespace string) {
	for _, obj := range rbac.GetAllApiServer(namespace) {
		emit(obj)
	}
}

func handlerRBAC(namespace string) {
	for _, obj := range rbac.GetAllHandler(namespace) {
		emit(obj)
	}
}

func main() {
	namespace := flag.String("namespace", "kubevirt", "install namespace (virt-api)")
	flag.Parse()
	switch flag.Arg(0) {
	case "crds":
		crds()
	case "virt-api":
		virtAPI(*namespace)
	case "rbac":
		apiServerRBAC(*namespace)
	case "handler-rbac":
		handlerRBAC(*namespace)
	default:
		fmt.Fprintln(os.Stderr, "usage: kubevirt-manifests [-namespace NS] crds|virt-api|rbac|handler-rbac")
		os.Exit(2)
	}
}
