package transporttest

import (
	"slices"

	"github.com/mrlab/mrlab/transport"
)

// Region is one registered memory region.
type Region struct {
	Key    uint32
	Addr   uint64 // address of Buf[0] in the host's virtual address space
	Buf    []byte
	Access transport.Access
}

// Memory is a simple transport.Memory: a table of regions looked up by key.
// The zero value is an empty table. It never allocates.
type Memory struct {
	regions []Region // sorted by Key
}

var _ transport.Memory = (*Memory)(nil)

// NewMemory returns an empty memory table.
func NewMemory() *Memory { return &Memory{} }

// Register adds (or replaces) the region named key, covering buf at address
// addr with the given permissions.
func (m *Memory) Register(key uint32, addr uint64, buf []byte, access transport.Access) {
	r := Region{Key: key, Addr: addr, Buf: buf, Access: access}
	i, found := slices.BinarySearchFunc(m.regions, key, func(r Region, k uint32) int { return cmpU32(r.Key, k) })
	if found {
		m.regions[i] = r
		return
	}
	m.regions = slices.Insert(m.regions, i, r)
}

// Deregister removes the region named key, if any.
func (m *Memory) Deregister(key uint32) {
	i, found := slices.BinarySearchFunc(m.regions, key, func(r Region, k uint32) int { return cmpU32(r.Key, k) })
	if found {
		m.regions = slices.Delete(m.regions, i, i+1)
	}
}

// Region returns the region named key.
func (m *Memory) Region(key uint32) (Region, bool) {
	i, found := slices.BinarySearchFunc(m.regions, key, func(r Region, k uint32) int { return cmpU32(r.Key, k) })
	if !found {
		return Region{}, false
	}
	return m.regions[i], true
}

// Check implements transport.Memory.
func (m *Memory) Check(key uint32, addr uint64, n int, access transport.Access) transport.Status {
	_, st := m.Resolve(key, addr, n, access)
	return st
}

// Read implements transport.Memory.
func (m *Memory) Read(dst []byte, key uint32, addr uint64, access transport.Access) transport.Status {
	b, st := m.Resolve(key, addr, len(dst), access)
	copy(dst, b)
	return st
}

// Write implements transport.Memory.
func (m *Memory) Write(key uint32, addr uint64, src []byte, access transport.Access) transport.Status {
	b, st := m.Resolve(key, addr, len(src), access)
	copy(b, src)
	return st
}

// Resolve returns the n bytes at addr in the region named by key. A
// failed lookup returns StatusRemoteAccess when access asks for a remote
// permission and StatusLocalProtection otherwise (a local key check).
func (m *Memory) Resolve(key uint32, addr uint64, n int, access transport.Access) ([]byte, transport.Status) {
	bad := transport.StatusLocalProtection
	if access&(transport.AccessRemoteWrite|transport.AccessRemoteRead) != 0 {
		bad = transport.StatusRemoteAccess
	}
	i, found := slices.BinarySearchFunc(m.regions, key, func(r Region, k uint32) int { return cmpU32(r.Key, k) })
	if !found || n < 0 {
		return nil, bad
	}
	r := &m.regions[i]
	if r.Access&access != access {
		return nil, bad
	}
	// Bounds, written so that no sum can overflow.
	if addr < r.Addr {
		return nil, bad
	}
	off := addr - r.Addr
	size := uint64(len(r.Buf))
	if off > size || uint64(n) > size-off {
		return nil, bad
	}
	return r.Buf[off : off+uint64(n) : off+uint64(n)], transport.StatusOK
}

func cmpU32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
