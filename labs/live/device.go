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
		n, err := dev.Read(b.bufs, b.sizes, in.offset)
		if err != nil {
			in.free <- b
			return err
		}
		// Take what else the kernel has queued into the same batch while
		// a whole super-packet still fits: one hand-off to the loop per
		// batch, not per packet (UDP arrives a packet per read).
		if q, ok := dev.(queuedReader); ok {
			for n > 0 && n+in.room <= len(b.bufs) {
				if more, err := q.Readable(); err != nil || !more {
					break
				}
				k, err := dev.Read(b.bufs[n:], b.sizes[n:], in.offset)
				if err != nil || k <= 0 {
					break // the next Read reports it
				}
				n += k
			}
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

// kernelOutput carries packets from the loop goroutine to a writer goroutine (a
// TUN write is a system call; keeping it off the loop goroutine keeps the
// loop on time). Packets are copied into fixed slots, so sending allocates
// nothing; when every slot is in flight the packet is dropped and counted,
// like a full device transmit queue. The writer hands the device
// everything queued at once, up to its batch size, in buffers with room
// for the device to coalesce a flow's segments (a TUN's GRO).
type kernelOutput struct {
	slots [][]byte
	lens  []int
	free  chan int32
	queue chan int32
	done  <-chan struct{}
	size  int // each slot's size; slots are allocated when first used

	drops atomic.Uint64
	sent  atomic.Uint64
}

// groBytes is the room of each of the writer's buffers: what the device
// may coalesce into one packet it hands the kernel.
const groBytes = 16 << 10

// newOutput returns an output with n slots of size bytes. It stops when the
// pacer does.
func (p *Pacer) newOutput(n, size int) *kernelOutput {
	o := &kernelOutput{slots: make([][]byte, n), lens: make([]int, n), free: make(chan int32, n), queue: make(chan int32, n), done: p.done, size: size}
	for i := range o.slots {
		o.free <- int32(i)
	}
	return o
}

// Send queues a copy of pkt. It never blocks: it returns false (and counts
// a drop) when the queue is full or pkt is larger than a slot.
func (o *kernelOutput) Send(pkt []byte) bool {
	var slot int32
	select {
	case slot = <-o.free:
	default:
		o.drops.Add(1)
		return false
	}
	if len(pkt) > o.size {
		o.free <- slot
		o.drops.Add(1)
		return false
	}
	if o.slots[slot] == nil {
		o.slots[slot] = make([]byte, o.size) // once per slot, while traffic grows
	}
	o.lens[slot] = copy(o.slots[slot], pkt)
	o.queue <- slot // cannot block: queue has room for every slot
	return true
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
	batch := max(dev.BatchSize(), 1)
	for {
		var slot int32
		select {
		case slot = <-o.queue:
		case <-o.done:
			return nil
		}
		if bufs == nil {
			bufs = make([][]byte, batch)
			for i := range bufs {
				bufs[i] = make([]byte, 0, hostns.Headroom+max(groBytes, o.size))
			}
		}
		k := 0
		for {
			b := bufs[k][:hostns.Headroom+o.lens[slot]]
			copy(b[hostns.Headroom:], o.slots[slot][:o.lens[slot]])
			bufs[k] = b
			o.free <- slot
			k++
			if k == batch {
				break
			}
			select {
			case slot = <-o.queue:
				continue
			default:
			}
			break
		}
		_, err := dev.Write(bufs[:k], hostns.Headroom)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return err
			}
			o.drops.Add(uint64(countErrs(err)))
			o.sent.Add(uint64(k - min(k, countErrs(err))))
			continue
		}
		o.sent.Add(uint64(k))
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
