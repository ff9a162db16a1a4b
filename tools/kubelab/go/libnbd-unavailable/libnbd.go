// Package libnbd is the lab's stand-in for libguestfs.org/libnbd (see go.mod): the API subset KubeVirt v1.8.0's
// virt-launcher compiles against, where creating a handle fails. Nothing in the lab uses KubeVirt's NBD backup
// client; a backup request on the lab's real node therefore fails with this package's error, named as such.
package libnbd

import "errors"

// ErrUnavailable is what every operation returns.
var ErrUnavailable = errors.New("libnbd is not available in the kubelab build of virt-launcher " +
	"(libguestfs.org/libnbd is not served by the Go module proxy; see tools/kubelab/go/libnbd-unavailable)")

// Meta contexts and extent flags, with libnbd's values.
const (
	CONTEXT_BASE_ALLOCATION   = "base:allocation"
	CONTEXT_QEMU_DIRTY_BITMAP = "qemu:dirty-bitmap:"
	STATE_HOLE                = uint32(1)
	STATE_ZERO                = uint32(2)
	STATE_DIRTY               = uint32(1)
)

// LibnbdExtent is one extent of a block status reply.
type LibnbdExtent struct {
	Length uint64
	Flags  uint64
}

// ExtentCallback64 receives the extents of BlockStatus64.
type ExtentCallback64 func(metacontext string, offset uint64, entries []LibnbdExtent, nbdErr *int) int

// BlockStatus64Optargs are BlockStatus64's optional arguments.
type BlockStatus64Optargs struct{}

// PreadOptargs are Pread's optional arguments.
type PreadOptargs struct{}

// Libnbd is a handle; none can be created.
type Libnbd struct{}

// Create fails: there is no libnbd.
func Create() (*Libnbd, error) { return nil, ErrUnavailable }

// Close does nothing.
func (h *Libnbd) Close() error { return nil }

// AddMetaContext fails.
func (h *Libnbd) AddMetaContext(string) error { return ErrUnavailable }

// CanMetaContext fails.
func (h *Libnbd) CanMetaContext(string) (bool, error) { return false, ErrUnavailable }

// SetExportName fails.
func (h *Libnbd) SetExportName(string) error { return ErrUnavailable }

// ConnectUnix fails.
func (h *Libnbd) ConnectUnix(string) error { return ErrUnavailable }

// GetSize fails.
func (h *Libnbd) GetSize() (uint64, error) { return 0, ErrUnavailable }

// Pread fails.
func (h *Libnbd) Pread([]byte, uint64, *PreadOptargs) error { return ErrUnavailable }

// BlockStatus64 fails.
func (h *Libnbd) BlockStatus64(uint64, uint64, ExtentCallback64, *BlockStatus64Optargs) error {
	return ErrUnavailable
}
