package softnic

import (
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// The data oracle's hooks in the DMA engine: a region can report every
// placement the NIC makes into it (OnPlace), say where its content first
// differs from a stream (FirstDiff), and, in tests of data checks, carry a
// planted fault (Plant): a placement skipped, moved or repeated later, or
// a gather answered from the wrong offset. Regions without a tap pay one
// nil test per placement.

// regionTap is what a region's DMA engine runs besides plain placement.
type regionTap struct {
	onPlace func(off, n int)
	fault   PlantedFault
	writes  int // placements seen, for fault.Nth
	reads   int // gathers seen
	replay  sim.Timer
	saved   savedWrite
}

// savedWrite is a placement kept to be repeated (FaultReplayWrite): its
// bytes and the content runs it carried, rebased to the copy.
type savedWrite struct {
	v    *memView
	m    *MR
	off  uint64
	src  []byte
	runs []packet.Run
}

// Fault is a kind of planted DMA fault.
type Fault uint8

// Planted faults, each the symptom of a transport bug a data check must
// catch (see PlantedFault).
const (
	// FaultNone plants nothing.
	FaultNone Fault = iota
	// FaultDropWrite skips the Nth placement into the region: its bytes
	// never land, but the transport, which accepted the packet, goes on
	// to complete the message (a completion before every byte is placed).
	FaultDropWrite
	// FaultShiftWrite places the Nth placement Shift bytes further on (a
	// chunk written into the wrong message's slot).
	FaultShiftWrite
	// FaultReplayWrite places the Nth placement again Delay later (a
	// stale copy overwriting memory after its message completed).
	FaultReplayWrite
	// FaultShiftRead answers the Nth gather from the region from Shift
	// bytes further on (a READ response read from the wrong offset).
	FaultShiftRead
)

// PlantedFault is one fault planted in a region's DMA engine by Plant.
// Nth counts placements (or gathers, for FaultShiftRead) into the region
// from 1; a shifted access that would leave the region is clamped to it.
type PlantedFault struct {
	Kind  Fault
	Nth   int
	Shift int
	Delay sim.Time
}

func (m *MR) tapOrNew() *regionTap {
	if m.tap == nil {
		m.tap = &regionTap{}
		m.tap.replay.Init(fireReplay, m.tap)
	}
	return m.tap
}

// OnPlace makes fn run after every placement the NIC makes into the
// region (a peer's WRITE, a READ response, a SEND into a posted receive)
// with the range placed, on the NIC's goroutine, before the transport
// goes on (so before any completion the packet causes). nil removes it.
// It is how a workload tells a byte placed where no message is expected
// (after its message completed, or in a slot no message is headed for)
// from one placed in time.
func (m *MR) OnPlace(fn func(off, n int)) { m.tapOrNew().onPlace = fn }

// Plant plants a fault in the region's DMA engine: for tests that show a
// data check catches what the fault breaks. Production code never calls
// it.
func (m *MR) Plant(f PlantedFault) { m.tapOrNew().fault = f }

// FirstDiff returns the offset, from off, of the first byte of off..off+n
// that does not hold the content stream named by seed from its start, or
// -1 if the whole range does (Matches). It returns 0 for a range outside
// the region.
func (m *MR) FirstDiff(off, n int, seed uint64) int {
	if !m.inside(off, n) {
		return 0
	}
	if m.syn != nil {
		return m.syn.firstDiff(uint64(off), uint64(n), seed)
	}
	b := m.buf[off : off+n]
	if matches(b, seed) {
		return -1
	}
	return firstDiff(b, seed)
}

// FirstNonZero returns the offset, from off, of the first non-zero byte of
// off..off+n, or -1 if all are zero (IsZero). It returns 0 for a range
// outside the region.
func (m *MR) FirstNonZero(off, n int) int {
	if !m.inside(off, n) {
		return 0
	}
	if m.syn != nil {
		i := m.syn.first(uint64(off))
		if i == len(m.syn.ext) || m.syn.ext[i].start >= uint64(off+n) {
			return -1
		}
		return int(max(m.syn.ext[i].start, uint64(off)) - uint64(off))
	}
	return firstNonZero(m.buf[off : off+n])
}

// firstDiff is FirstDiff for a synthetic region: the first position in
// [a, a+n) not covered by an extent continuing stream from position 0.
func (m *contentMap) firstDiff(a, n, stream uint64) int {
	cur, end := a, a+n
	for i := m.first(a); i < len(m.ext) && cur < end; i++ {
		e := &m.ext[i]
		if e.start > cur || e.stream != stream || stream == opaqueStream || e.pos+(cur-e.start) != cur-a {
			return int(cur - a)
		}
		cur = e.end
	}
	if cur < end {
		return int(cur - a)
	}
	return -1
}

// write is memView.Write's placement through a tap: the planted fault,
// then the placement, then the report.
func (t *regionTap) write(v *memView, m *MR, off uint64, src []byte, runs []packet.Run, base int) {
	t.writes++
	if f := t.fault; f.Kind != FaultNone && t.writes == f.Nth {
		switch f.Kind {
		case FaultDropWrite:
			return
		case FaultShiftWrite:
			off = uint64(clampShift(int(off), len(src), f.Shift, m.size))
		case FaultReplayWrite:
			s := savedWrite{v: v, m: m, off: off, src: append([]byte(nil), src...)}
			for _, r := range runs {
				r.Off -= int32(base)
				s.runs = append(s.runs, r)
			}
			t.saved = s
			t.replay.Own(v.nic.org)
			v.nic.sched.Arm(&t.replay, v.nic.sched.Now()+f.Delay)
		}
	}
	v.place(m, off, src, runs, base)
	if t.onPlace != nil {
		t.onPlace(int(off), len(src))
	}
}

// fireReplay places a saved placement again.
func fireReplay(_ sim.Time, arg any) {
	t := arg.(*regionTap)
	s := t.saved
	if s.m == nil || !s.m.valid {
		return
	}
	s.v.place(s.m, s.off, s.src, s.runs, 0)
	if t.onPlace != nil {
		t.onPlace(int(s.off), len(s.src))
	}
}

// readAt returns the offset a gather of n bytes at off reads from.
func (t *regionTap) readAt(off uint64, n, size int) uint64 {
	t.reads++
	if f := t.fault; f.Kind == FaultShiftRead && t.reads == f.Nth {
		return uint64(clampShift(int(off), n, f.Shift, size))
	}
	return off
}

func clampShift(off, n, shift, size int) int {
	return max(0, min(off+shift, size-n))
}
