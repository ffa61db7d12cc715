package workload

import (
	"encoding/binary"
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// collective is the shared part of alltoall and allreduce: a set of ranks
// (hosts), operations run one after another with a barrier between them,
// and per-operation timing.
type collective struct {
	r       *runner
	spec    Spec
	ranks   []int // host index by rank
	iter    int
	opStart sim.Time
	busy    int // ranks still working on the current operation
}

func (c *collective) setupRanks(r *runner) error {
	c.r = r
	for _, h := range c.spec.From {
		c.ranks = append(c.ranks, r.cl.index(h))
	}
	if len(c.ranks) == 0 {
		for i := range r.cl.Hosts {
			c.ranks = append(c.ranks, i)
		}
	}
	if len(c.ranks) < 2 {
		return fmt.Errorf("%w: %s needs at least 2 hosts", ErrBadSpec, c.spec.Name)
	}
	for _, h := range c.ranks {
		r.source[h] = true
	}
	return nil
}

// opDone records the end of an operation and reports whether another
// should start.
func (c *collective) opDone(now sim.Time) bool {
	c.r.flowDone(now - c.opStart)
	c.iter++
	if c.iter < c.spec.Iterations {
		return true
	}
	n := float64(len(c.ranks))
	res := &c.r.res
	res.AlgBWGbps = gbps(int64(c.spec.Size)*int64(c.spec.Iterations), now-c.r.t0)
	if c.spec.Name == AllReduce {
		res.BusBWGbps = res.AlgBWGbps * 2 * (n - 1) / n
	} else {
		res.BusBWGbps = res.AlgBWGbps * (n - 1) / n
	}
	c.r.finish(now)
	return false
}

// --- all-to-all ---

// a2aEngine is all-to-all: in each operation every rank WRITEs size/N
// bytes to every other rank, into a per-sender region of the receiver's
// buffer. With C connections per pair the chunk is striped: connection k
// carries its k-th slice.
type a2aEngine struct {
	collective
	chunk  int
	stride int
	send   []*softnic.MR // by rank: N chunks, one per destination
	recv   []*softnic.MR // by rank: N regions, one per source
	conns  [][]*connReq  // [src rank][dst rank*Conns + k]
	ends   []*a2aRank
	posted []sim.Time // by src*N+dst
	last   int        // last operation whose writes completed
}

type a2aRank struct {
	e    *a2aEngine
	rank int
}

func newA2A(spec Spec) *a2aEngine { return &a2aEngine{collective: collective{spec: spec}, last: -1} }

func (e *a2aEngine) setup(r *runner) error {
	if err := e.setupRanks(r); err != nil {
		return err
	}
	n := len(e.ranks)
	e.chunk = e.spec.Size / n
	if e.chunk < 1 {
		return fmt.Errorf("%w: alltoall size %d is smaller than the %d hosts", ErrBadSpec, e.spec.Size, n)
	}
	e.stride = e.chunk + guard
	if e.spec.Payload != softnic.PayloadSynthetic && int64(n)*int64(n)*int64(e.stride)*2 > memoryLimit {
		return fmt.Errorf("%w: alltoall would register more than %d MiB", ErrBadSpec, memoryLimit>>20)
	}
	e.posted = make([]sim.Time, n*n*e.spec.Conns)
	for i, h := range e.ranks {
		var err error
		s, err := r.register(h, n*e.chunk, transport.AccessLocalWrite)
		if err != nil {
			return err
		}
		d, err := r.register(h, n*e.stride, transport.AccessLocalWrite|transport.AccessRemoteWrite)
		if err != nil {
			return err
		}
		e.send, e.recv = append(e.send, s), append(e.recv, d)
		e.ends = append(e.ends, &a2aRank{e: e, rank: i})
	}
	e.conns = make([][]*connReq, n)
	for i := range e.ranks {
		e.conns[i] = make([]*connReq, n*e.spec.Conns)
		for j := range e.ranks {
			if i == j {
				continue
			}
			for k := 0; k < e.spec.Conns; k++ {
				e.conns[i][j*e.spec.Conns+k] = r.connect(e.ranks[i], e.ranks[j], e.ends[i], nil)
			}
		}
	}
	return nil
}

func (e *a2aEngine) seed(src, dst, op int) uint64 {
	return msgSeed(e.spec.Seed, src*len(e.ranks)+dst, int64(op))
}

func (e *a2aEngine) start(now sim.Time) { e.op(now) }

// slice returns the byte range of a chunk that connection k of C carries.
func slice(chunk, k, c int) (lo, hi int) { return chunk * k / c, chunk * (k + 1) / c }

// op starts operation e.iter: every rank writes to every other, each
// chunk striped over the pair's connections. Rank i posts to its peers in
// the order of their offset, i+1, i+2, ... (mod N), as NCCL's all-to-all
// schedules its peers: each rank's first WRITE then goes to a different
// receiver. Posting to ranks 0, 1, 2, ... from every rank would send every
// rank's first packets to one receiver at once, a hot spot no collective
// library makes (it cost lossless RoCEv2 a quarter of its all-to-all
// bandwidth on the results page's bed).
func (e *a2aEngine) op(now sim.Time) {
	n, conns := len(e.ranks), e.spec.Conns
	e.opStart = now
	e.busy = 0
	for i := range e.ranks {
		for d := 1; d < n; d++ {
			j := (i + d) % n
			e.send[i].Fill(j*e.chunk, e.chunk, e.seed(i, j, e.iter))
			for k := 0; k < conns; k++ {
				lo, hi := slice(e.chunk, k, conns)
				if lo == hi {
					continue
				}
				wr := transport.WorkRequest{ID: uint64(j*conns + k), Op: transport.OpWrite, NumSGE: 1,
					RemoteAddr: e.recv[j].Addr() + uint64(i*e.stride+lo), RKey: e.recv[j].RKey()}
				wr.SGL[0] = e.send[i].SGE(j*e.chunk+lo, hi-lo)
				e.posted[(i*n+j)*conns+k] = now
				e.busy++
				if testA2APost != nil {
					testA2APost(i, j)
				}
				if err := e.conns[i][j*conns+k].dial.PostSend(&wr); err != nil {
					e.r.fail(fmt.Errorf("alltoall: posting WRITE: %w", err))
					return
				}
			}
		}
	}
}

// testA2APost, if set (by tests), sees every all-to-all WRITE as it is
// posted: the sender's and the receiver's rank.
var testA2APost func(src, dst int)

func (a *a2aRank) complete(now sim.Time, wc *softnic.Completion) {
	e := a.e
	n, conns := len(e.ranks), e.spec.Conns
	id := int(wc.ID)
	if wc.Status != transport.StatusOK {
		e.r.bad(wc, "failed")
	} else if id < n*conns {
		lo, hi := slice(e.chunk, id%conns, conns)
		e.r.message(now, e.posted[a.rank*n*conns+id], hi-lo)
	}
	e.busy--
	if e.busy > 0 {
		return
	}
	if e.r.res.Errors > 0 {
		e.last = e.iter - 1
		e.r.finish(now)
		return
	}
	e.last = e.iter
	if e.opDone(now) {
		e.op(now)
	}
}

func (e *a2aEngine) verify() DataCheck {
	dc := DataCheck{OK: true}
	for j := range e.ranks {
		mem := e.recv[j]
		for i := range e.ranks {
			at := i * e.stride
			dc.Regions++
			dc.Bytes += int64(e.stride)
			ok := mem.IsZero(at+e.chunk, e.stride-e.chunk)
			if i == j || e.last < 0 {
				ok = ok && mem.IsZero(at, e.chunk)
			} else {
				ok = ok && mem.Matches(at, e.chunk, e.seed(i, j, e.last))
			}
			if !ok {
				dc.OK = false
				dc.BadRegions++
				if dc.FirstBad == "" {
					dc.FirstBad = fmt.Sprintf("%s's region from %s after operation %d",
						e.r.cl.Hosts[e.ranks[j]], e.r.cl.Hosts[e.ranks[i]], e.last)
				}
			}
		}
	}
	return dc
}

func (e *a2aEngine) outstanding() string {
	return fmt.Sprintf("operation %d of %d, %d writes outstanding", e.iter+1, e.spec.Iterations, e.busy)
}

// --- ring all-reduce ---

// ringEngine is ring all-reduce: reduce-scatter then all-gather, N-1 steps
// each. At each step rank i WRITEs one chunk (size/N bytes) to rank i+1
// with an immediate naming the step; rank i+1 adds it into its own vector
// (reduce-scatter, from a staging slot per step) or keeps it (all-gather,
// written in place), then sends its next step. Elements are uint32 added
// with wrap-around, so the expected result is exact. With C connections
// per pair there are C rings (NCCL's channels), ring k over the k-th slice
// of every chunk on the k-th connection, each stepping on its own.
type ringEngine struct {
	collective
	chunk int           // bytes, a multiple of 4
	data  []*softnic.MR // by rank: the vector
	stage []*softnic.MR // by rank: N-1 staging slots
	init  [][]byte      // by rank: the initial vector
	conns [][]*connReq  // by rank: to the next rank, one per channel
	ends  [][]*ringRank // by rank, channel
}

// ringRank is one rank's end of one channel's ring.
type ringRank struct {
	e       *ringEngine
	rank    int
	channel int
	lo, hi  int // the channel's slice of every chunk
	step    int // next step to send
	recvd   int // steps received this operation
	sent    int // sends completed this operation
	posted  []sim.Time
}

func newRingEngine(spec Spec) *ringEngine { return &ringEngine{collective: collective{spec: spec}} }

func (e *ringEngine) setup(r *runner) error {
	if err := e.setupRanks(r); err != nil {
		return err
	}
	n, conns := len(e.ranks), e.spec.Conns
	e.chunk = e.spec.Size / (4 * n) * 4
	if e.chunk < 4*conns {
		return fmt.Errorf("%w: allreduce size %d is smaller than 4 bytes per host and channel (%d hosts, %d channels)", ErrBadSpec, e.spec.Size, n, conns)
	}
	if int64(n)*int64(e.chunk)*int64(n)*3 > memoryLimit {
		return fmt.Errorf("%w: allreduce would register more than %d MiB", ErrBadSpec, memoryLimit>>20)
	}
	e.spec.Size = e.chunk * n // the vector actually reduced
	r.res.Size = e.spec.Size
	rw := transport.AccessLocalWrite | transport.AccessRemoteWrite
	words := e.chunk / 4
	for i, h := range e.ranks {
		d, err := r.register(h, n*e.chunk, rw)
		if err != nil {
			return err
		}
		s, err := r.register(h, (n-1)*e.chunk, rw)
		if err != nil {
			return err
		}
		d.Fill(0, d.Len(), msgSeed(e.spec.Seed, i, 0))
		e.data, e.stage = append(e.data, d), append(e.stage, s)
		e.init = append(e.init, append([]byte(nil), d.Bytes()...))
		var ends []*ringRank
		for c := 0; c < conns; c++ {
			lo, hi := slice(words, c, conns)
			ends = append(ends, &ringRank{e: e, rank: i, channel: c, lo: 4 * lo, hi: 4 * hi, posted: make([]sim.Time, 2*(n-1))})
		}
		e.ends = append(e.ends, ends)
	}
	e.conns = make([][]*connReq, n)
	for i := range e.ranks {
		next := (i + 1) % n
		for c := 0; c < conns; c++ {
			e.conns[i] = append(e.conns[i], r.connect(e.ranks[i], e.ranks[next], e.ends[i][c], e.ends[next][c]))
		}
	}
	return nil
}

func (e *ringEngine) start(now sim.Time) {
	r := e.r
	r.res.Size = e.spec.Size
	e.op(now)
}

// op starts operation e.iter: receives first, then every ring's step 0.
func (e *ringEngine) op(now sim.Time) {
	n := len(e.ranks)
	e.opStart = now
	e.busy = n * e.spec.Conns
	for i := range e.ranks {
		for c, rk := range e.ends[i] {
			in := e.conns[(i-1+n)%n][c].acc
			for s := 0; s < 2*(n-1); s++ {
				wr := transport.WorkRequest{ID: uint64(s), Op: transport.OpRecv}
				if err := in.PostRecv(&wr); err != nil {
					e.r.fail(fmt.Errorf("allreduce: posting RECV: %w", err))
					return
				}
			}
			rk.step, rk.recvd, rk.sent = 0, 0, 0
		}
	}
	for _, ends := range e.ends {
		for _, rk := range ends {
			rk.send(now)
		}
	}
}

// send posts this rank's next step on its channel.
func (rk *ringRank) send(now sim.Time) {
	e := rk.e
	n := len(e.ranks)
	k := rk.step
	rk.step++
	next := (rk.rank + 1) % n
	var c int
	var raddr uint64
	var rkey uint32
	if k < n-1 { // reduce-scatter: into the next rank's staging slot k
		c = ((rk.rank-k)%n + n) % n
		raddr, rkey = e.stage[next].Addr()+uint64(k*e.chunk+rk.lo), e.stage[next].RKey()
	} else { // all-gather: in place
		c = ((rk.rank+1-(k-(n-1)))%n + n) % n
		raddr, rkey = e.data[next].Addr()+uint64(c*e.chunk+rk.lo), e.data[next].RKey()
	}
	wr := transport.WorkRequest{ID: uint64(k), Op: transport.OpWriteImm, NumSGE: 1,
		RemoteAddr: raddr, RKey: rkey, Imm: uint32(k)}
	wr.SGL[0] = e.data[rk.rank].SGE(c*e.chunk+rk.lo, rk.hi-rk.lo)
	rk.posted[k] = now
	if err := e.conns[rk.rank][rk.channel].dial.PostSend(&wr); err != nil {
		e.r.fail(fmt.Errorf("allreduce: posting WRITE_IMM: %w", err))
	}
}

func (rk *ringRank) complete(now sim.Time, wc *softnic.Completion) {
	e := rk.e
	n := len(e.ranks)
	steps := 2 * (n - 1)
	if wc.Status != transport.StatusOK {
		e.r.bad(wc, "failed")
		e.r.finish(now)
		return
	}
	switch wc.Op {
	case transport.OpWriteImm:
		if k := int(wc.ID); k < steps {
			e.r.message(now, rk.posted[k], rk.hi-rk.lo)
		}
		rk.sent++
	case transport.OpRecvImm:
		k := int(wc.Imm)
		if !wc.HasImm || k != rk.recvd || k >= steps {
			e.r.bad(wc, fmt.Sprintf("step %d out of order (want %d)", wc.Imm, rk.recvd))
			e.r.finish(now)
			return
		}
		rk.recvd++
		if k < n-1 {
			prev := (rk.rank - 1 + n) % n
			c := ((prev-k)%n + n) % n
			add(e.data[rk.rank].Bytes()[c*e.chunk+rk.lo:c*e.chunk+rk.hi], e.stage[rk.rank].Bytes()[k*e.chunk+rk.lo:k*e.chunk+rk.hi])
		}
		if rk.step < steps {
			rk.send(now)
		}
	default:
		e.r.bad(wc, "unexpected completion")
		return
	}
	if rk.sent == steps && rk.recvd == steps {
		rk.sent = -1 // counted
		e.busy--
		if e.busy == 0 && e.opDone(now) {
			e.op(now)
		}
	}
}

// add adds src into dst as little-endian uint32s.
func add(dst, src []byte) {
	for i := 0; i+4 <= len(dst); i += 4 {
		binary.LittleEndian.PutUint32(dst[i:], binary.LittleEndian.Uint32(dst[i:])+binary.LittleEndian.Uint32(src[i:]))
	}
}

// verify checks every rank's vector against the exact result: after t
// operations every element is N^(t-1) times the sum of the initial
// elements (mod 2^32).
func (e *ringEngine) verify() DataCheck {
	dc := DataCheck{OK: true}
	n := len(e.ranks)
	words := n * e.chunk / 4
	want := make([]uint32, words)
	for _, b := range e.init {
		for w := range want {
			want[w] += binary.LittleEndian.Uint32(b[4*w:])
		}
	}
	if e.iter == 0 {
		return DataCheck{FirstBad: "no operation completed"}
	}
	mul := uint32(1)
	for t := 1; t < e.iter; t++ {
		mul *= uint32(n)
	}
	for i := range e.ranks {
		mem := e.data[i].Bytes()
		for c := 0; c < n; c++ {
			dc.Regions++
			dc.Bytes += int64(e.chunk)
			ok := true
			for w := c * e.chunk / 4; w < (c+1)*e.chunk/4; w++ {
				if binary.LittleEndian.Uint32(mem[4*w:]) != want[w]*mul {
					ok = false
					break
				}
			}
			if !ok {
				dc.OK = false
				dc.BadRegions++
				if dc.FirstBad == "" {
					dc.FirstBad = fmt.Sprintf("%s's chunk %d after %d operations", e.r.cl.Hosts[e.ranks[i]], c, e.iter)
				}
			}
		}
	}
	return dc
}

func (e *ringEngine) outstanding() string {
	s := fmt.Sprintf("operation %d of %d", e.iter+1, e.spec.Iterations)
	for _, ends := range e.ends {
		for _, rk := range ends {
			if rk.sent >= 0 {
				s += fmt.Sprintf("; %s channel %d sent %d received %d", e.r.cl.Hosts[e.ranks[rk.rank]], rk.channel, rk.sent, rk.recvd)
			}
		}
	}
	return s
}

func newEngine(spec Spec) (engine, error) {
	switch spec.Name {
	case WriteBW, SendBW, ReadBW, Permutation, Incast:
		return newStream(spec), nil
	case WriteLat, SendLat, ReadLat:
		return newLat(spec), nil
	case AllToAll:
		return newA2A(spec), nil
	case AllReduce:
		return newRingEngine(spec), nil
	}
	return nil, fmt.Errorf("%w: unknown workload %q", ErrBadSpec, spec.Name)
}
