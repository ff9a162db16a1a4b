// kubelab-csi-registrar: registers a CSI driver with the kubelet's plugin watcher, as node-driver-registrar does
// (github.com/kubernetes-csi/node-driver-registrar is not served by the Go module proxy: 403). It serves the kubelet's
// pluginregistration/v1 Registration service on a socket in the kubelet's plugins_registry directory; the kubelet
// calls GetInfo (the driver's name, its CSI endpoint, the CSI versions), then NodeGetInfo on the driver itself, and
// reports the outcome through NotifyRegistrationStatus. A failed registration ends this process (exit 1), as
// node-driver-registrar's does; SIGTERM removes the socket.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type registrar struct {
	registerapi.UnimplementedRegistrationServer
	driver   string
	endpoint string
	failed   chan string
}

func (r *registrar) GetInfo(ctx context.Context, req *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	log.Printf("kubelet asked for the plugin's info: %s at %s", r.driver, r.endpoint)
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.driver, Endpoint: r.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registrar) NotifyRegistrationStatus(ctx context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if status.PluginRegistered {
		log.Printf("kubelet registered %s", r.driver)
	} else {
		log.Printf("kubelet did not register %s: %s", r.driver, status.Error)
		r.failed <- status.Error
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func main() {
	driver := flag.String("driver-name", "", "the CSI driver's name (as its GetPluginInfo answers)")
	endpoint := flag.String("csi-address", "", "path of the driver's CSI socket as the kubelet sees it")
	registry := flag.String("plugins-registry", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin watcher directory")
	flag.Parse()
	if *driver == "" || *endpoint == "" {
		fmt.Fprintln(os.Stderr, "kubelab-csi-registrar: --driver-name and --csi-address are required")
		os.Exit(2)
	}
	if _, err := os.Stat(*endpoint); err != nil {
		log.Fatalf("the driver's socket %s: %v", *endpoint, err)
	}
	socket := filepath.Join(*registry, *driver+"-reg.sock")
	if err := os.MkdirAll(*registry, 0o750); err != nil {
		log.Fatalf("creating %s: %v", *registry, err)
	}
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		log.Fatalf("removing the stale socket %s: %v", socket, err)
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatalf("listening on %s: %v", socket, err)
	}
	server := grpc.NewServer()
	r := &registrar{driver: *driver, endpoint: *endpoint, failed: make(chan string, 1)}
	registerapi.RegisterRegistrationServer(server, r)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		if err := server.Serve(listener); err != nil {
			log.Fatalf("serving %s: %v", socket, err)
		}
	}()
	log.Printf("serving the registration of %s on %s", *driver, socket)
	code := 0
	select {
	case sig := <-signals:
		log.Printf("%v: stopping", sig)
	case reason := <-r.failed:
		log.Printf("registration failed: %s", reason)
		code = 1
	}
	server.Stop()
	os.Remove(socket)
	os.Exit(code)
}
