package softnic

import (
	"fmt"

	"github.com/mrlab/mrlab/transport"
)

// RegisterAt registers buf as Register does, but the region's first
// address is addr, chosen by the caller: ibv_reg_mr gives a region the
// buffer's own virtual address (its iova), and peers then name it by the
// addresses the program sent them. Regions are found by key, never by
// address, so two regions may share addresses without one reaching into
// the other; addr+len(buf) must not wrap.
func (pd *PD) RegisterAt(buf []byte, access transport.Access, addr uint64) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("registering memory region: %w", ErrEmptyRegion)
	}
	if addr > ^uint64(0)-uint64(len(buf)) {
		return nil, fmt.Errorf("registering %d bytes at %#x: the range wraps the address space", len(buf), addr)
	}
	m, err := pd.register(&MR{buf: buf, size: len(buf), access: access})
	if err != nil {
		return nil, err
	}
	m.addr = addr
	return m, nil
}
