// The lab's stand-in for libguestfs.org/libnbd (the Go bindings of libnbd), which the Go module proxy does not
// serve (403 Forbidden for v1.25.2-5-g48df7c4d2b, the version kubevirt.io/kubevirt v1.8.0 requires) and Debian 12
// does not package. KubeVirt's virt-launcher uses it only for its NBD backup client (changed block tracking:
// pkg/virt-launcher/virtwrap/storage/nbd_client.go); every call here fails with ErrUnavailable.
module libguestfs.org/libnbd

go 1.24
