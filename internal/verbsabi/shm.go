package verbsabi

import (
	"errors"
	"fmt"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared memory is always a memfd. Registered memory is the client's: it
// must be sealed against shrinking (F_SEAL_SHRINK), so the endpoint's
// mapping can never lose pages under the NIC (a shrunk memfd would raise
// SIGBUS in the lab). Rings and the doorbell page are the endpoint's:
// sealed against any resize.

// ErrNotSealed is returned by CheckMemfd for memory that could shrink.
var ErrNotSealed = errors.New("not a memfd sealed against shrinking (F_SEAL_SHRINK)")

// CreateMemfd returns a new memfd of size bytes (a raw descriptor the
// caller closes). With fixed it is sealed against growing, shrinking and
// further seals; otherwise only against shrinking (and further seals), as
// REG_MR requires.
func CreateMemfd(name string, size int, fixed bool) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sizing memfd to %d bytes: %w", size, err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
	if fixed {
		seals |= unix.F_SEAL_GROW
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sealing memfd: %w", err)
	}
	return fd, nil
}

// CreateMapped creates a fixed-size memfd and maps it whole: the
// endpoint's rings and doorbell pages. The caller sends fd and closes it.
func CreateMapped(name string, size int) (fd int, mem []byte, err error) {
	fd, err = CreateMemfd(name, size, true)
	if err != nil {
		return -1, nil, err
	}
	mem, err = Map(fd, 0, size)
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, mem, nil
}

// CheckMemfd checks that fd is memory REG_MR may map: a memfd sealed
// against shrinking, at least off+length bytes long.
func CheckMemfd(fd int, off, length uint64) error {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return ErrNotSealed
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if st.Size < 0 || uint64(st.Size) < off || uint64(st.Size)-off < length {
		return fmt.Errorf("memfd holds %d bytes, region wants %d at offset %d", st.Size, length, off)
	}
	return nil
}

// Map maps length bytes at off of fd, shared, readable and writable.
func Map(fd int, off uint64, length int) ([]byte, error) {
	if off%PageSize != 0 {
		return nil, fmt.Errorf("mapping at offset %d: not page-aligned", off)
	}
	if length <= 0 {
		return nil, fmt.Errorf("mapping %d bytes", length)
	}
	b, err := unix.Mmap(fd, int64(off), length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap of %d bytes: %w", length, err)
	}
	return b, nil
}

// Unmap unmaps memory Map returned.
func Unmap(b []byte) error { return unix.Munmap(b) }

// NewEventfd returns a non-blocking eventfd (a doorbell or a CQ's event
// channel). As an *os.File its reads wait in Go's poller, so closing it
// ends a pending read.
func NewEventfd(name string) (*os.File, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Signal writes 1 to an eventfd: the doorbell or a CQ's event. An eventfd
// write fails only when the counter would overflow, which means the
// reader already has a wakeup pending.
func Signal(fd int) {
	var one = [8]byte{1}
	_, _ = unix.Write(fd, one[:])
}

// DupFD returns a new descriptor for f's open file (close-on-exec),
// without touching f's blocking mode (os.File.Fd would make it blocking).
func DupFD(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	cerr := rc.Control(func(fd uintptr) {
		nfd, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if cerr != nil {
		return -1, cerr
	}
	if err != nil {
		return -1, fmt.Errorf("duplicating %s: %w", f.Name(), err)
	}
	return nfd, nil
}

// CloseFDs closes raw descriptors (received ones nobody took).
func CloseFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// ParseRights returns the descriptors an SCM_RIGHTS control message
// carries (all of them, so the caller can close what it does not want).
func ParseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			CloseFDs(fds)
			return nil, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// OOBSpace returns the size of the control buffer a receiver needs for MaxFDs descriptors.
func OOBSpace() int { return unix.CmsgSpace(4 * MaxFDs) }

// futexWake is FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the word is in
// memory shared with other processes.
const futexWake = 1

// WakeWord wakes every thread, in any process, waiting (FUTEX_WAIT) on
// the shared-memory word w. It is a hint: a waiter re-reads the word.
func WakeWord(w *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, math.MaxInt32, 0, 0, 0)
}
