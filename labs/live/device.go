package live

import (
	"errors"
	"os"
	"sync/atomic"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs/hostns"
)

// Device is a host's packet interface to its kernel, shaped like
// wireguard-go's tun.Device: Read fills up to len(bufs) packets at bufs[i]
// [offset:] and their sizes; Write writes each bufs[i][offset:] as one packet.
// The TUN device of a live host (hostns.TUN) is one; tests use fakes.
// One goroutine reads and another writes; Close unblocks both with
// os.ErrClosed.
type Device interface {
	Read(bufs [][]byte, sizes []int, offset int) (int, error)
	Write(bufs [][]byte, offset int) (int, error)
	BatchSize() int
	MTU() int
	Close() error
}

var _ Device = (*hostns.TUN)(nil)

// kernelInput is a source of packets from outside the loop (a TUN reader). Its
// goroutine reads a batch at a time into fixed buffers, stamps it with the
// loop time of the read and queues it for the loop, which copies each
// packet into its own pool and returns the batch. Reading allocates
// nothing.
type kernelInput struct {
	p      *Pacer
	free   chan *inBatch
	sink   func(now sim.Time, b *packet.Buffer)
	offset int
	room   int // buffers one Read may fill: a super-packet's segments

	// Direct inputs (direct.go): the loop reads dev itself into own.
	dev      Device
	try      tryDevice // dev, if it can say it is empty (direct.go)
	fd       int
	own      *inBatch
	closed   bool
	readErrs uint64 // reads that failed (loop goroutine)
}

// inBatch is one read's packets, waiting for the loop.
type inBatch struct {
	in    *kernelInput
	at    sim.Time // loop time of the read
	n     int
	bufs  [][]byte
	sizes []int
}

// queuedReader is a Device that can tell whether a Read would find a
// packet at once (hostns.TUN).
type queuedReader interface {
	Readable() (bool, error)
}

// inputBatches is how many batches each input has: one being read while
// others wait for the loop.
const inputBatches = 4

// newInput returns an input whose reads take batch packets of up to size
// bytes (after offset bytes of headroom). sink runs on the loop goroutine
// for every packet and takes ownership of it.
func (p *Pacer) newInput(batch, offset, size int, sink func(now sim.Time, b *packet.Buffer)) *kernelInput {
	// A TCP super-packet of up to 64 KiB splits into segments of at least
	// size-40 bytes of payload.
	room := min(batch, 65535/max(size-40, 1)+1)
	in := &kernelInput{p: p, free: make(chan *inBatch, inputBatches), sink: sink, offset: offset, room: room}
	for range inputBatches {
		b := &inBatch{in: in, bufs: make([][]byte, batch), sizes: make([]int, batch)}
		for i := range b.bufs {
			b.bufs[i] = make([]byte, offset+size)
		}
		in.free <- b
	}
	return in
}

// readFrom reads batches from dev and queues them for the loop until a
// read fails or the pacer stops; it returns the read's error (nil when the
// pacer stopped). Run it on its own goroutine.
func (in *kernelInput) readFrom(dev Device) error {
	select {
	case <-in.p.started:
	case <-in.p.done:
		return nil
	}
	for {
		var b *inBatch
		select {
		case b = <-in.free:
		case <-in.p.done:
			return nil
		}
		var more func() bool
		if q, ok := dev.(queuedReader); ok {
			more = func() bool { ok, err := q.Readable(); return err == nil && ok }
		}
		n, err := in.fill(b, dev, more)
		if err != nil {
			in.free <- b
			return err
		}
		if n <= 0 {
			in.free <- b
			continue
		}
		b.n, b.at = n, in.p.elapsed()
		select {
		case in.p.input <- b:
			in.p.kick()
		case <-in.p.done:
			return nil
		}
	}
}

// fill reads a batch from dev into b and returns its packet count: one
// Read, then, while more (if set) says the kernel has packets queued and
// a whole super-packet still fits, more Reads into the same batch, so a
// batch is handed on once, not per packet (UDP arrives a packet per read).
func (in *kernelInput) fill(b *inBatch, dev Device, more func() bool) (int, error) {
	n, err := dev.Read(b.bufs, b.sizes, in.offset)
	if err != nil {
		return 0, err
	}
	for more != nil && n > 0 && n+in.room <= len(b.bufs) && more() {
		k, err := dev.Read(b.bufs[n:], b.sizes[n:], in.offset)
		if err != nil || k <= 0 {
			break // the next Read reports it
		}
		n += k
	}
	return n, nil
}

// kernelOutput carries packets from the loop goroutine to a kernel. By
// default (inline) the loop writes each batch itself: one system call,
// where handing it to a writer goroutine costs a wake-up of the writer's
// thread, which on this project's VM costs more CPU than the write and
// adds tens of microseconds to every ping. A kernel slow to take packets
// then slows the loop, which counts it as lateness. Inline, Send copies a
// packet straight into the buffers the device writes from, and flush
// writes what they hold (one copy of every byte before the kernel's).
// Without inline, a
// writer goroutine (WriteTo) takes the batches. The loop copies each packet into the
// batch it is filling and hands the writer whole batches: when one fills,
// and at the end of every pass of the loop over due events (Pacer.flush),
// so a packet waits at most for the events due with it. One channel
// operation and at most one wake-up of the writer per batch, not per
// packet; batches come back warm (the writer returns them to the loop's
// free list as soon as it has copied them out), so the copies touch the
// same few cache lines and pages over and over, not the whole queue's
// worth (a FIFO of per-packet slots at 100 Gbit/s cycled through 250 MB).
// When n packets are queued the packet is dropped and counted, like a
// full device transmit queue. The writer hands the device up to its batch size
// of packets at once, in buffers with room for the device to coalesce a
// flow's segments (a TUN's GRO).
type kernelOutput struct {
	p     *Pacer
	size  int   // largest packet
	limit int64 // packets queued or being written, at most
	free  chan *outBatch
	queue chan *outBatch
	done  <-chan struct{}

	queued atomic.Int64 // packets handed over and not yet copied out
	dev    Device       // where the loop (inline) writes
	inline bool         // the loop writes batches itself; no writer goroutine
	// ibufs are the loop's write buffers (inline), allocated on first
	// use: Send copies each packet straight into the next, ready for the
	// device (its headroom in front), and flush writes the first in.
	ibufs [][]byte
	in    int

	// Loop-goroutine state.
	cur   *outBatch // the batch being filled
	dirty bool      // cur is on the pacer's flush list

	drops atomic.Uint64
	sent  atomic.Uint64
}

// outBatch is a batch of packets for a kernel, back to back in data:
// packet i ends at ends[i]. Its slices keep their capacity when the batch
// is reused, so a batch allocates only while traffic grows.
type outBatch struct {
	data []byte
	ends []int
}

// outBatchPackets is how many packets a batch holds at most: about a TUN
// write's batch.
const outBatchPackets = 64

// groBytes is the room of each of the writer's buffers: what the device
// may coalesce into one packet it hands the kernel. 64 KiB holds the
// largest IPv4 packet, so a run of a TCP flow's segments in one batch
// (44 of 1448 bytes) reaches the kernel in one write, as a NIC's GRO
// hands it on: with 16 KiB, 11 segments, b2b's iperf3 TCP at 10 Gbit/s
// took 0.134 writes a packet; with 64 KiB, 0.071, and the lab spent 15%
// less CPU a packet (TestWriteCoalescesSegmentRun).
const groBytes = 64 << 10

// newOutput returns an output that queues up to n packets of up to size
// bytes. It stops when the pacer does.
func (p *Pacer) newOutput(dev Device, n, size int, inline bool) *kernelOutput {
	// At most one batch per packet queued (a lightly loaded loop flushes
	// a packet at a time), plus the one being filled.
	return &kernelOutput{p: p, dev: dev, inline: inline, size: size, limit: int64(n), free: make(chan *outBatch, n+1), queue: make(chan *outBatch, n+1), done: p.done}
}

// Send queues a copy of pkt. Loop goroutine only. It never blocks: it
// returns false (and counts a drop) when n packets are queued or pkt is
// larger than size.
func (o *kernelOutput) Send(pkt []byte) bool {
	if len(pkt) > o.size || o.queued.Load() >= o.limit {
		o.drops.Add(1)
		return false
	}
	if o.inline {
		// One copy, into the buffer the device writes from (a batch in
		// between cost a second copy of every byte for the kernel).
		if o.ibufs == nil {
			o.ibufs = newWriteBufs(o.dev, o.size)
		}
		o.ibufs[o.in] = o.ibufs[o.in][:hostns.Headroom+len(pkt)]
		copy(o.ibufs[o.in][hostns.Headroom:], pkt)
		o.in++
		o.queued.Add(1)
		if o.in == len(o.ibufs) {
			o.flush()
		} else if !o.dirty {
			o.dirty = true
			o.p.flushes = append(o.p.flushes, o)
		}
		return true
	}
	b := o.cur
	if b == nil {
		select {
		case b = <-o.free:
		default:
			b = &outBatch{data: make([]byte, 0, 4*o.size), ends: make([]int, 0, outBatchPackets)}
		}
		o.cur = b
		if !o.dirty {
			o.dirty = true
			o.p.flushes = append(o.p.flushes, o)
		}
	}
	o.queued.Add(1)
	b.data = append(b.data, pkt...)
	b.ends = append(b.ends, len(b.data))
	if len(b.ends) == outBatchPackets {
		o.flush()
	}
	return true
}

// flush hands the batch being filled to the writer. Loop goroutine only.
func (o *kernelOutput) flush() {
	if o.inline {
		// Write from here rather than wake a writer.
		if k := o.in; k > 0 {
			o.in = 0
			o.queued.Add(-int64(k))
			o.writeBufs(o.dev, o.ibufs[:k])
		}
		return
	}
	b := o.cur
	if b == nil || len(b.ends) == 0 {
		return
	}
	o.queue <- b // cannot block: queue has room for a batch per packet
	o.cur = nil
}

// newWriteBufs returns a writer's buffers for dev: a device batch of
// packets of up to size bytes, each with room to coalesce a flow's
// segments.
func newWriteBufs(dev Device, size int) [][]byte {
	// A write never takes more than a batch of the loop's (outBatch).
	bufs := make([][]byte, max(min(dev.BatchSize(), outBatchPackets), 1))
	for i := range bufs {
		bufs[i] = make([]byte, 0, hostns.Headroom+max(groBytes, size))
	}
	return bufs
}

// write writes batch b to dev through bufs, calling copied once every
// packet of b is copied out (b may then be reused). It returns the
// device's error when the device is closed.
func (o *kernelOutput) write(dev Device, bufs [][]byte, b *outBatch, copied func()) error {
	per := len(bufs)
	n := len(b.ends)
	for i, start := 0, 0; i < n; {
		k := min(per, n-i)
		for j := range k {
			pkt := b.data[start:b.ends[i+j]]
			start = b.ends[i+j]
			bufs[j] = bufs[j][:hostns.Headroom+len(pkt)]
			copy(bufs[j][hostns.Headroom:], pkt)
		}
		i += k
		if i == n {
			copied()
		}
		if err := o.writeBufs(dev, bufs[:k]); err != nil {
			o.drops.Add(uint64(n - i))
			return err
		}
	}
	return nil
}

// writeBufs writes bufs (packets after hostns.Headroom) to dev in one
// Write, counting what was sent and dropped; it returns the device's
// error when the device is closed (all of bufs dropped).
func (o *kernelOutput) writeBufs(dev Device, bufs [][]byte) error {
	k := len(bufs)
	_, err := dev.Write(bufs, hostns.Headroom)
	switch {
	case err == nil:
		o.sent.Add(uint64(k))
	case errors.Is(err, os.ErrClosed):
		o.drops.Add(uint64(k))
		return err
	default:
		o.drops.Add(uint64(countErrs(err)))
		o.sent.Add(uint64(k - min(k, countErrs(err))))
	}
	return nil
}

// Drops returns how many packets Send dropped.
func (o *kernelOutput) Drops() uint64 { return o.drops.Load() }

// Sent returns how many packets the writer wrote.
func (o *kernelOutput) Sent() uint64 { return o.sent.Load() }

// WriteTo writes queued packets to dev, a batch at a time, until the pacer
// stops or a write fails with the device closed. Other write errors (the
// kernel refusing a packet) count as one drop each. Run it on its own
// goroutine; its buffers are allocated when the first packet comes, so an
// idle host costs none.
func (o *kernelOutput) WriteTo(dev Device) error {
	var bufs [][]byte
	for {
		var b *outBatch
		select {
		case b = <-o.queue:
		case <-o.done:
			return nil
		}
		if bufs == nil {
			bufs = newWriteBufs(dev, o.size)
		}
		n := len(b.ends)
		err := o.write(dev, bufs, b, func() {
			// Copied out: the loop may fill it again while the
			// device writes (b is the loop's from here on).
			b.data, b.ends = b.data[:0], b.ends[:0]
			o.queued.Add(-int64(n))
			select {
			case o.free <- b:
			default: // more batches than packets queued: let it go
			}
		})
		if err != nil {
			return err
		}
	}
}

// countErrs counts the errors joined in err (a batch write reports one per
// refused packet).
func countErrs(err error) int {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	return 1
}
