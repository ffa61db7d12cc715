package softnic

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/mrlab/mrlab/internal/packet"
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
// A synthetic region (RegisterSynthetic) has a length but no bytes: its
// content is a function of (region, offset) that the NIC tracks as content
// streams (Fill, Matches), and packets carry the stream instead of the
// bytes. Transfers between synthetic regions are checked as exactly as
// byte copies (every range ends up holding the stream and position it
// was sent from) without storing or copying payload.
//
// The NIC assigns every region its own address range on that NIC, so an
// address that falls outside a region never silently lands in another one.
type MR struct {
	pd     *PD
	buf    []byte
	syn    *contentMap // nil for a byte region
	size   int
	addr   uint64
	access transport.Access
	key    uint32
	valid  bool
	tap    *regionTap // the data oracle's hooks (oracle.go); nil: none
}

// Errors from memory registration.
var (
	ErrEmptyRegion  = errors.New("softnic: empty memory region")
	ErrDeregistered = errors.New("softnic: memory region already deregistered")
	ErrTooManyMRs   = errors.New("softnic: memory region table full")
)

// maxMRs bounds how many regions a NIC holds at once.
const maxMRs = 1<<24 - 1

// mrAlign separates regions' address ranges: a region starts on a boundary
// and a guard gap follows it, so off-by-one addresses hit no region.
const mrAlign = 1 << 16

// Every region's key is 32 fresh random bits and its address a random
// aligned address in [vaFloor, vaFloor+vaSpan), drawn independently of
// every earlier region (both from the NIC's key stream: the seeded one in
// sim mode, KeySource in live labs): a peer that knows some keys and
// addresses learns nothing about the next ones, and the expected number of
// guesses to hit one live region's key is 2^31. recentKeys of the keys
// deregistered last are never drawn again, so a stale key cannot name the
// region registered after it.
const (
	vaFloor    = 0x1000_0000_0000
	vaSpan     = 0x4000_0000_0000
	recentKeys = 1024
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
	return pd.register(&MR{buf: buf, size: len(buf), access: access})
}

// RegisterSynthetic registers a synthetic region of n bytes, all zero: its
// content is set with Fill and checked with Matches and IsZero, never
// stored (Bytes returns nil).
func (pd *PD) RegisterSynthetic(n int, access transport.Access) (*MR, error) {
	if n <= 0 {
		return nil, fmt.Errorf("registering synthetic memory region of %d bytes: %w", n, ErrEmptyRegion)
	}
	return pd.register(&MR{syn: &contentMap{}, size: n, access: access})
}

func (pd *PD) register(mr *MR) (*MR, error) {
	n := pd.nic
	if len(n.mrs) >= maxMRs {
		return nil, fmt.Errorf("registering memory region of %d bytes: %w", mr.size, ErrTooManyMRs)
	}
	key := n.keyRand.Uint32()
	for key == 0 || n.mrs[key] != nil || n.recentKey(key) {
		key = n.keyRand.Uint32()
	}
	span := mrSpan(mr.size)
	addr := n.drawVA(span)
	for n.overlaps(addr, span) {
		addr = n.drawVA(span)
	}
	mr.pd, mr.addr, mr.key, mr.valid = pd, addr, key, true
	n.mrs[key] = mr
	n.addByAddr(mr)
	return mr, nil
}

// drawVA draws a region's first address: aligned, and with room for span
// bytes below vaFloor+vaSpan.
func (n *NIC) drawVA(span uint64) uint64 {
	slots := (vaSpan - min(span, vaSpan/2)) / mrAlign
	return vaFloor + n.keyRand.Uint64N(slots)*mrAlign
}

// overlaps reports whether [addr, addr+span) meets a live region's range
// or guard gap: a binary search of the regions by address.
func (n *NIC) overlaps(addr, span uint64) bool {
	i := sort.Search(len(n.byAddr), func(i int) bool { return n.byAddr[i].addr >= addr })
	if i < len(n.byAddr) && n.byAddr[i].addr < addr+span {
		return true
	}
	return i > 0 && n.byAddr[i-1].addr+mrSpan(n.byAddr[i-1].size) > addr
}

// mrSpan is the address space a region of size bytes takes: its bytes
// rounded up to mrAlign and a guard gap.
func mrSpan(size int) uint64 { return (uint64(size) + 2*mrAlign - 1) &^ (mrAlign - 1) }

// addByAddr and dropByAddr keep n.byAddr sorted by address.
func (n *NIC) addByAddr(m *MR) {
	i := sort.Search(len(n.byAddr), func(i int) bool { return n.byAddr[i].addr >= m.addr })
	n.byAddr = append(n.byAddr, nil)
	copy(n.byAddr[i+1:], n.byAddr[i:])
	n.byAddr[i] = m
}

func (n *NIC) dropByAddr(m *MR) {
	i := sort.Search(len(n.byAddr), func(i int) bool { return n.byAddr[i].addr >= m.addr })
	if i < len(n.byAddr) && n.byAddr[i] == m {
		copy(n.byAddr[i:], n.byAddr[i+1:])
		n.byAddr[len(n.byAddr)-1] = nil
		n.byAddr = n.byAddr[:len(n.byAddr)-1]
	}
}

// recentKey reports whether key was deregistered lately.
func (n *NIC) recentKey(key uint32) bool {
	for _, k := range n.oldKeys {
		if k == key {
			return true
		}
	}
	return false
}

// LKey returns the key local scatter-gather elements use.
func (m *MR) LKey() uint32 { return m.key }

// RKey returns the key peers use. As on common RDMA NICs it equals LKey;
// whether remote access is allowed is the region's access flags' business.
func (m *MR) RKey() uint32 { return m.key }

// Addr returns the region's first virtual address.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the region's length in bytes.
func (m *MR) Len() int { return m.size }

// Bytes returns the registered memory; nil for a synthetic region.
func (m *MR) Bytes() []byte { return m.buf }

// Synthetic reports whether the region is synthetic (RegisterSynthetic).
func (m *MR) Synthetic() bool { return m.syn != nil }

// Fill makes bytes off..off+n of the region hold the content stream named
// by seed, from its start: in a byte region it writes them, in a synthetic
// one it records them. It returns false if the range is outside the region
// or the region is deregistered.
func (m *MR) Fill(off, n int, seed uint64) bool {
	if !m.inside(off, n) || seed == opaqueStream {
		return false
	}
	if m.syn != nil {
		m.syn.set(uint64(off), uint64(n), seed, 0)
	} else {
		fill(m.buf[off:off+n], seed)
	}
	return true
}

// Matches reports whether bytes off..off+n hold the content stream named
// by seed from its start (what Fill(off, n, seed) wrote, wherever it was
// written and however it got here).
func (m *MR) Matches(off, n int, seed uint64) bool {
	if !m.inside(off, n) {
		return false
	}
	if m.syn != nil {
		return m.syn.matches(uint64(off), uint64(n), seed)
	}
	return matches(m.buf[off:off+n], seed)
}

// IsZero reports whether bytes off..off+n are all zero.
func (m *MR) IsZero(off, n int) bool {
	if !m.inside(off, n) {
		return false
	}
	if m.syn != nil {
		return m.syn.zero(uint64(off), uint64(n))
	}
	return zero(m.buf[off : off+n])
}

// Extents returns how many content extents a synthetic region holds (0
// for a byte region): its memory cost, one per run of differing content.
func (m *MR) Extents() int {
	if m.syn == nil {
		return 0
	}
	return len(m.syn.ext)
}

func (m *MR) inside(off, n int) bool {
	return m.valid && off >= 0 && n >= 0 && off <= m.size && n <= m.size-off
}

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
	m.buf, m.syn = nil, nil
	n := m.pd.nic
	delete(n.mrs, m.key)
	n.dropByAddr(m)
	if len(n.oldKeys) < recentKeys {
		n.oldKeys = append(n.oldKeys, m.key)
	} else {
		n.oldKeys[n.oldNext] = m.key
		n.oldNext = (n.oldNext + 1) % recentKeys
	}
	return nil
}

// lookup returns the valid region a key names, or nil.
func (n *NIC) lookup(key uint32) *MR {
	m := n.mrs[key]
	if m == nil || !m.valid {
		return nil
	}
	return m
}

// memView is a connection's view of its NIC's region table: only the
// connection's protection domain is visible. It implements transport.Memory:
// the NIC's DMA engine.
type memView struct {
	nic  *NIC
	pd   *PD
	conn *Conn // counts refusals; nil in unit tests of the view
	// last is the region the view last looked up: a connection names
	// the same region packet after packet, and a valid region with its
	// key is the one the NIC's table holds (keys are never reused while
	// valid), so the table's map is read once per region, not per packet.
	last *MR
}

var _ transport.Memory = (*memView)(nil)

const remoteAccess = transport.AccessRemoteWrite | transport.AccessRemoteRead

// Check implements transport.Memory. Reads for local sends ask for no
// access bit; receives and READ responses ask for AccessLocalWrite; peers'
// WRITEs and READs ask for AccessRemoteWrite or AccessRemoteRead.
//
// Every refusal is counted on the NIC and the connection (AccessErrors for
// a peer's request, ProtectionErrors for a local SGE): on the responder
// side, where no completion reports a refused WRITE, that is how the
// refusal shows.
func (v *memView) Check(key uint32, addr uint64, n int, access transport.Access) transport.Status {
	_, _, st := v.region(key, addr, n, access)
	return st
}

// Read implements transport.Memory. From a synthetic region it zeroes
// dst and records on the packet being built which content stream each
// range of dst carries.
func (v *memView) Read(dst []byte, key uint32, addr uint64, access transport.Access) transport.Status {
	return v.read(dst, key, addr, access, false)
}

// ReadLazy implements transport.ZeroSpanner: Read, except that content
// it records on the packet being built is not zeroed (NIC.txLazy):
// ZeroSpan writes the zeros its caller reads, and the NIC those left in
// the span when the packet goes out whole (txZeros); a header-only packet
// needs none of them.
func (v *memView) ReadLazy(dst []byte, key uint32, addr uint64, access transport.Access) transport.Status {
	return v.read(dst, key, addr, access, true)
}

func (v *memView) read(dst []byte, key uint32, addr uint64, access transport.Access, lazy bool) transport.Status {
	m, off, st := v.region(key, addr, len(dst), access)
	if st != transport.StatusOK {
		return st
	}
	if m.tap != nil {
		off = m.tap.readAt(off, len(dst), m.size)
	}
	if m.syn == nil {
		copy(dst, m.buf[off:])
		return st
	}
	p := v.nic.dmaTx
	base, ok := 0, false
	if p != nil {
		base, ok = p.Offset(dst)
	}
	if !ok {
		// Not a slice of the packet: the transport stages payload
		// elsewhere, so carry real bytes.
		v.nic.stats.SyntheticMaterialized++
		clear(dst)
		m.syn.each(off, uint64(len(dst)), func(o, n, stream, pos uint64) {
			if stream != opaqueStream {
				fillAt(dst[o:o+n], stream, pos)
			}
		})
		return st
	}
	if lazy {
		v.nic.txLazy = true
	} else {
		clear(dst)
	}
	m.syn.each(off, uint64(len(dst)), func(o, n, stream, pos uint64) {
		p.Synthetic = append(p.Synthetic, packet.Run{Off: int32(base) + int32(o), Len: int32(n), Stream: stream, Pos: pos})
	})
	return st
}

var _ transport.ZeroSpanner = (*memView)(nil)

// ZeroSpan implements transport.ZeroSpanner. In the packet being built it
// is the last contiguous range of content runs Read or ReadLazy recorded;
// after ReadLazy it writes the zeros of the other runs in b (its caller
// reads them) and notes the span for the NIC (txZero). In the packet
// being received, it is the payload that travelled header-only (the NIC
// expanded it to zeros; a packet whose bytes were touched on the way,
// such as a corrupted one, was expanded before and has none). Anything
// else, including bytes mode, reports none.
func (v *memView) ZeroSpan(b []byte) (at, n int) {
	if p := v.nic.dmaTx; p != nil {
		first, start, end := lastRange(p.Synthetic)
		if first >= 0 {
			at, n = clipSpan(p, b, start, end-start)
		}
		if v.nic.txLazy {
			if first == 0 && n == end-start {
				// The runs are one range, all in b: no other zeros to
				// write.
				v.nic.txAsked, v.nic.txZero, v.nic.txZeroN = true, start, n
			} else {
				v.nic.settleTx(p, b, at, n)
			}
		}
		return at, n
	}
	if p := v.nic.dmaRx; p != nil && v.nic.rxZeroN > 0 {
		return clipSpan(p, b, v.nic.rxZero, v.nic.rxZeroN)
	}
	return 0, 0
}

// lastRange returns the last contiguous range of runs, start..end of the
// buffer, from runs[first] on; first is -1 if the last run is empty or
// there is none.
func lastRange(runs []packet.Run) (first, start, end int) {
	i := len(runs) - 1
	if i < 0 || runs[i].Len <= 0 {
		return -1, 0, 0
	}
	start, end = int(runs[i].Off), int(runs[i].Off+runs[i].Len)
	for i > 0 && runs[i-1].Len > 0 && int(runs[i-1].Off+runs[i-1].Len) == start {
		i--
		start = int(runs[i].Off)
	}
	return i, start, end
}

// clipSpan returns the part of the span [off, off+n) of p's buffer that
// lies in b (a slice of it), relative to b.
func clipSpan(p *packet.Buffer, b []byte, off, n int) (int, int) {
	base, ok := p.Offset(b)
	if !ok {
		return 0, 0
	}
	s, e := max(off, base), min(off+n, base+len(b))
	if s >= e {
		return 0, 0
	}
	return s - base, e - s
}

// Write implements transport.Memory. Ranges of src that carry a content
// stream (from a synthetic region) are recorded as such in a synthetic
// region and generated in a byte region; real bytes are copied into a byte
// region, and into a synthetic one are recorded as zero if they are, else
// as content no check will ever match.
func (v *memView) Write(key uint32, addr uint64, src []byte, access transport.Access) transport.Status {
	m, off, st := v.region(key, addr, len(src), access)
	if st != transport.StatusOK {
		return st
	}
	var runs []packet.Run
	base := 0
	if p := v.nic.dmaRx; p != nil && len(p.Synthetic) > 0 {
		if b, ok := p.Offset(src); ok {
			runs, base = p.Synthetic, b
		}
	}
	if m.tap != nil {
		m.tap.write(v, m, off, src, runs, base)
		return st
	}
	v.place(m, off, src, runs, base)
	return st
}

// place places src at offset off of m: runs (at packet offset base) say
// which ranges of src carry a content stream.
func (v *memView) place(m *MR, off uint64, src []byte, runs []packet.Run, base int) {
	if len(runs) == 0 && m.syn == nil {
		copy(m.buf[off:], src)
		return
	}
	// Walk src in order: real bytes up to each run that overlaps it, then
	// the run's part.
	cur := 0
	for i := range runs {
		r := &runs[i]
		s, e := int(r.Off)-base, int(r.Off+r.Len)-base
		if e <= cur || s >= len(src) {
			continue
		}
		if s < cur { // runs are in order and disjoint; tolerate overlap
			s = cur
		}
		v.writeBytes(m, off+uint64(cur), src[cur:s])
		pos := r.Pos + uint64(s-(int(r.Off)-base))
		e = min(e, len(src))
		if m.syn != nil {
			m.syn.set(off+uint64(s), uint64(e-s), r.Stream, pos)
		} else if r.Stream != opaqueStream {
			fillAt(m.buf[off+uint64(s):off+uint64(e)], r.Stream, pos)
		}
		cur = e
	}
	v.writeBytes(m, off+uint64(cur), src[cur:])
}

// writeBytes places real bytes.
func (v *memView) writeBytes(m *MR, off uint64, b []byte) {
	if len(b) == 0 {
		return
	}
	if m.syn == nil {
		copy(m.buf[off:], b)
		return
	}
	if zero(b) {
		m.syn.clear(off, off+uint64(len(b)))
		return
	}
	v.nic.stats.SyntheticOpaque++
	m.syn.set(off, uint64(len(b)), opaqueStream, 0)
}

// region finds the region for an access and the offset in it, counting a
// refusal.
func (v *memView) region(key uint32, addr uint64, n int, access transport.Access) (*MR, uint64, transport.Status) {
	if m, off, ok := v.lookupRange(key, addr, n, access); ok {
		return m, off, transport.StatusOK
	}
	if access&remoteAccess != 0 {
		v.nic.stats.AccessErrors++
		if v.conn != nil {
			v.conn.stats.AccessErrors++
			v.nic.poison(v.conn)
		}
		return nil, 0, transport.StatusRemoteAccess
	}
	v.nic.stats.ProtectionErrors++
	if v.conn != nil {
		v.conn.stats.ProtectionErrors++
	}
	return nil, 0, transport.StatusLocalProtection
}

func (v *memView) lookupRange(key uint32, addr uint64, n int, access transport.Access) (*MR, uint64, bool) {
	if n < 0 || (access&remoteAccess != 0 && v.conn != nil && v.conn.poisoned) {
		return nil, 0, false
	}
	m := v.last
	if m == nil || m.key != key || !m.valid {
		m = v.nic.lookup(key)
		v.last = m
	}
	if m == nil || m.pd != v.pd || m.access&access != access || addr < m.addr {
		return nil, 0, false
	}
	off := addr - m.addr
	if off > uint64(m.size) || uint64(n) > uint64(m.size)-off {
		return nil, 0, false
	}
	return m, off, true
}
