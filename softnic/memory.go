package softnic

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/mrlab/mrlab/transport"
)

// PD is a protection domain. Memory regions and connections belong to one;
// a connection can only reach regions of its own domain, whatever keys a
// peer sends.
type PD struct {
	nic *NIC
	id  uint32
}

// MR is a registered memory region: a []byte the application owns, given a
// virtual address range (like a real MR's iova) and a key. Peers name it by
// (RKey, address); local scatter-gather elements by (LKey, address).
//
// The NIC assigns every region its own address range on that NIC, so an
// address that falls outside a region never silently lands in another one.
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64
	access transport.Access
	key    uint32
	valid  bool
}

// Errors from memory registration.
var (
	ErrEmptyRegion  = errors.New("softnic: empty memory region")
	ErrDeregistered = errors.New("softnic: memory region already deregistered")
	ErrTooManyMRs   = errors.New("softnic: memory region table full")
)

// maxMRs bounds the region table: the index takes the key's upper 24 bits.
const maxMRs = 1<<24 - 1

// mrAlign separates regions' address ranges: a region starts on a boundary
// and a guard gap follows it, so off-by-one addresses hit no region.
const mrAlign = 1 << 16

// With a KeySource, the first region starts at a random aligned address in
// [vaFloor, vaFloor+vaSpan) and each later one after a random number (below
// maxVAGap) of extra guard gaps, so one region's address does not give
// away the next one's.
const (
	vaFloor   = 0x1000_0000_0000
	vaSpan    = 0x4000_0000_0000
	maxVAGap  = 1 << 12
	keyMask   = 1<<24 - 1
	keyTagMax = 255
)

// CryptoSource returns a rand.Source that reads crypto/rand: a NIC's
// KeySource in live labs.
func CryptoSource() rand.Source { return cryptoSource{} }

type cryptoSource struct{}

func (cryptoSource) Uint64() uint64 {
	var b [8]byte
	crand.Read(b[:]) // never fails (Go 1.24+: it crashes the program instead)
	return binary.LittleEndian.Uint64(b[:])
}

// AllocPD returns a new protection domain.
func (n *NIC) AllocPD() *PD {
	n.nextPD++
	return &PD{nic: n, id: n.nextPD}
}

// Register registers buf with the given access and returns the region. The
// application keeps owning buf: local reads and writes to it are its own
// business, as with ibv_reg_mr. buf may be memory the NIC does not own at
// all (the live verbs endpoint registers a client's shared mapping): from
// Deregister on, the NIC never touches it again, so the owner may unmap it
// as soon as Deregister returns.
func (pd *PD) Register(buf []byte, access transport.Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("registering memory region: %w", ErrEmptyRegion)
	}
	n := pd.nic
	var idx uint32
	if k := len(n.freeMRs); k > 0 {
		// Reuse a deregistered region's slot: a long-lived NIC whose
		// clients register and deregister keeps a table of its live
		// regions only. The fresh tag makes the old key invalid.
		idx, n.freeMRs = n.freeMRs[k-1], n.freeMRs[:k-1]
	} else if len(n.mrs) >= maxMRs {
		return nil, fmt.Errorf("registering memory region of %d bytes: %w", len(buf), ErrTooManyMRs)
	} else {
		n.mrs = append(n.mrs, nil)
		idx = uint32(len(n.mrs))
	}
	// The low byte is a tag drawn from the NIC's stream, as hardware mixes
	// a key byte into each key, so a peer cannot guess a valid key from an
	// index alone; with a KeySource the index is offset by a random base.
	tag := uint32(n.keyRand.Uint32N(keyTagMax) + 1)
	if old := n.mrs[idx-1]; old != nil {
		// A reused slot steps its tag, as hardware steps a key's variant
		// byte: a stale key names nothing for the next 254 reuses.
		tag = old.key&0xff%keyTagMax + 1
	}
	if n.secure {
		n.nextVA += n.keyRand.Uint64N(maxVAGap) * mrAlign
	}
	key := (idx+n.keyBase)&keyMask<<8 | tag
	mr := &MR{pd: pd, buf: buf, addr: n.nextVA, access: access, key: key, valid: true}
	n.nextVA += (uint64(len(buf)) + 2*mrAlign - 1) &^ (mrAlign - 1)
	n.mrs[idx-1] = mr
	return mr, nil
}

// LKey returns the key local scatter-gather elements use.
func (m *MR) LKey() uint32 { return m.key }

// RKey returns the key peers use. As on common RDMA NICs it equals LKey;
// whether remote access is allowed is the region's access flags' business.
func (m *MR) RKey() uint32 { return m.key }

// Addr returns the region's first virtual address.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the region's length in bytes.
func (m *MR) Len() int { return len(m.buf) }

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte { return m.buf }

// Access returns the region's access flags.
func (m *MR) Access() transport.Access { return m.access }

// SGE returns a scatter-gather element for n bytes at offset off in the
// region. It does not check bounds: the transport's Resolve does, and a bad
// SGE must fail the way a bad one would on hardware (a completion error).
func (m *MR) SGE(off, n int) transport.SGE {
	return transport.SGE{Addr: m.addr + uint64(off), Len: uint32(n), LKey: m.key}
}

// Deregister invalidates the region's keys: later accesses fail with a
// protection or remote access error. The NIC forgets the memory (Bytes
// returns nil afterwards); the application still owns it.
func (m *MR) Deregister() error {
	if !m.valid {
		return ErrDeregistered
	}
	m.valid = false
	m.buf = nil
	n := m.pd.nic
	n.freeMRs = append(n.freeMRs, (m.key>>8-n.keyBase)&keyMask)
	return nil
}

// lookup returns the valid region a key names, or nil.
func (n *NIC) lookup(key uint32) *MR {
	idx := (key>>8 - n.keyBase) & keyMask
	if idx == 0 || int(idx) > len(n.mrs) {
		return nil
	}
	m := n.mrs[idx-1]
	if m.key != key || !m.valid {
		return nil
	}
	return m
}

// memView is a connection's view of its NIC's region table: only the
// connection's protection domain is visible. It implements transport.Memory.
type memView struct {
	nic  *NIC
	pd   *PD
	conn *Conn // counts refusals; nil in unit tests of the view
}

var _ transport.Memory = (*memView)(nil)

const remoteAccess = transport.AccessRemoteWrite | transport.AccessRemoteRead

// Resolve implements transport.Memory. Reads for local sends ask for no
// access bit; receives and READ responses ask for AccessLocalWrite; peers'
// WRITEs and READs ask for AccessRemoteWrite or AccessRemoteRead.
//
// Every refusal is counted on the NIC and the connection (AccessErrors for
// a peer's request, ProtectionErrors for a local SGE): on the responder
// side, where no completion reports a refused WRITE, that is how the
// refusal shows.
func (v *memView) Resolve(key uint32, addr uint64, n int, access transport.Access) ([]byte, transport.Status) {
	b, ok := v.resolve(key, addr, n, access)
	if ok {
		return b, transport.StatusOK
	}
	if access&remoteAccess != 0 {
		v.nic.stats.AccessErrors++
		if v.conn != nil {
			v.conn.stats.AccessErrors++
		}
		return nil, transport.StatusRemoteAccess
	}
	v.nic.stats.ProtectionErrors++
	if v.conn != nil {
		v.conn.stats.ProtectionErrors++
	}
	return nil, transport.StatusLocalProtection
}

func (v *memView) resolve(key uint32, addr uint64, n int, access transport.Access) ([]byte, bool) {
	if n < 0 {
		return nil, false
	}
	m := v.nic.lookup(key)
	if m == nil || m.pd != v.pd || m.access&access != access || addr < m.addr {
		return nil, false
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n) : off+uint64(n)], true
}
