package verbs

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/verbsabi"
)

// Access is a set of memory region permissions (ibv_access_flags).
type Access uint32

// Access flags. Remote write needs local write too, as in ibv_reg_mr.
const (
	AccessLocalWrite  Access = verbsabi.AccessLocalWrite
	AccessRemoteWrite Access = verbsabi.AccessRemoteWrite
	AccessRemoteRead  Access = verbsabi.AccessRemoteRead
)

// PD is a protection domain: memory regions and QPs belong to one, and a
// QP reaches only its own domain's regions, whatever keys a peer sends.
type PD struct {
	d *Device
	h uint32
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	r, _, err := d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpAllocPD})
	if err != nil {
		return nil, err
	}
	return &PD{d: d, h: r.Handle}, nil
}

// Close deallocates the domain; it fails with ErrBusy while regions, QPs
// or listeners use it.
func (pd *PD) Close() error {
	_, _, err := pd.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpDeallocPD, PD: pd.h})
	return err
}

// MR is a registered memory region: memory this process shares with the
// lab, which the NIC reads from and places into directly.
type MR struct {
	pd         *PD
	mem        []byte
	full       []byte // the whole mapping (whole pages)
	lkey, rkey uint32
	addr       uint64
	mu         sync.Mutex
}

// AllocMR allocates size bytes of zeroed memory shared with the lab (a
// sealed memfd both map) and registers them with the given access.
func (pd *PD) AllocMR(size int, access Access) (*MR, error) {
	if size <= 0 {
		return nil, &Error{Op: "REG_MR", Err: ErrInvalid, Msg: fmt.Sprintf("region of %d bytes", size)}
	}
	n := verbsabi.RoundPage(size)
	fd, err := verbsabi.CreateMemfd("mrlab-verbs-mr", n, false)
	if err != nil {
		return nil, fmt.Errorf("verbs: allocating a region of %d bytes: %w", size, err)
	}
	defer unix.Close(fd)
	full, err := verbsabi.Map(fd, 0, n)
	if err != nil {
		return nil, fmt.Errorf("verbs: allocating a region of %d bytes: %w", size, err)
	}
	r, _, err := pd.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpRegMR, PD: pd.h, Access: uint32(access),
		Length: uint64(size)}, fd)
	if err != nil {
		verbsabi.Unmap(full)
		return nil, err
	}
	m := &MR{pd: pd, mem: full[:size:size], full: full, lkey: r.LKey, rkey: r.RKey, addr: r.MRAddr}
	pd.d.maps.Store(m, m)
	return m, nil
}

// Bytes returns the region's memory. It is valid until Close (of the
// region or its device); using it afterwards faults.
func (m *MR) Bytes() []byte { return m.mem }

// Len returns the region's length.
func (m *MR) Len() int { return len(m.mem) }

// LKey returns the key this process's SGEs name the region by.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the key a peer names the region by.
func (m *MR) RKey() uint32 { return m.rkey }

// Addr returns the region's first address as the NIC sees it: SGEs and
// peers' remote addresses are Addr plus an offset into the region (the
// region's iova, as with ibv_reg_mr_iova).
func (m *MR) Addr() uint64 { return m.addr }

// SGE returns the scatter-gather element for n bytes at offset off.
// Bounds are the NIC's to check: a bad SGE completes with
// StatusLocalProtection, as on hardware.
func (m *MR) SGE(off, n int) SGE {
	return SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.lkey}
}

// Close deregisters the region and unmaps its memory. Transfers still
// using it fail with protection or remote access errors.
func (m *MR) Close() error {
	if _, ok := m.pd.d.maps.LoadAndDelete(m); !ok {
		return &Error{Op: "DEREG_MR", Err: ErrClosed, Msg: "region already closed"}
	}
	_, _, err := m.pd.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpDeregMR, Key: m.lkey})
	m.unmap()
	return err
}

func (m *MR) unmap() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full != nil {
		verbsabi.Unmap(m.full)
		m.full, m.mem = nil, nil
	}
}
