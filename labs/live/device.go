package live

import (
	"errors"
	"os"
	"sync/atomic"

	"github.com/mrlab/mrlab/labs/hostns"
)

// Device is a host's packet interface to its kernel, shaped like
// wireguard-go's tun.Device: Read fills up to len(bufs) packets at bufs[i]
// [offset:] and their sizes; Write writes each bufs[i][offset:] as one packet.
// The TUN device of a live host is one (batch size 1); tests use a pipe.
// One goroutine reads and another writes; Close unblocks both with
// os.ErrClosed.
type Device interface {
	Read(bufs [][]byte, sizes []int, offset int) (int, error)
	Write(bufs [][]byte, offset int) (int, error)
	BatchSize() int
	MTU() int
	Close() error
}

// TUNDevice adapts a hostns.TUN to Device.
type TUNDevice struct{ T *hostns.TUN }

var _ Device = TUNDevice{}

// Read reads one packet.
func (d TUNDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := d.T.Read(bufs[0][offset:])
	if err != nil {
		return 0, err
	}
	sizes[0] = n
	return 1, nil
}

// Write writes each buffer as a packet.
func (d TUNDevice) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		if _, err := d.T.Write(b[offset:]); err != nil {
			return i, err
		}
	}
	return len(bufs), nil
}

// BatchSize is 1: water reads one packet per system call.
func (d TUNDevice) BatchSize() int { return 1 }

// MTU returns the device MTU.
func (d TUNDevice) MTU() int { return d.T.MTU() }

// Close closes the TUN device.
func (d TUNDevice) Close() error { return d.T.Close() }

// Output carries packets from the loop goroutine to a writer goroutine (a
// TUN write is a system call; keeping it off the loop goroutine keeps the
// loop on time). Packets are copied into fixed slots, so sending allocates
// nothing; when every slot is in flight the packet is dropped and counted,
// like a full device transmit queue.
type Output struct {
	slots [][]byte
	lens  []int
	free  chan int32
	queue chan int32
	done  <-chan struct{}

	drops atomic.Uint64
	sent  atomic.Uint64
}

// NewOutput returns an output with n slots of size bytes. It stops when the
// pacer does.
func (p *Pacer) NewOutput(n, size int) *Output {
	o := &Output{slots: make([][]byte, n), lens: make([]int, n), free: make(chan int32, n), queue: make(chan int32, n), done: p.done}
	for i := range o.slots {
		o.slots[i] = make([]byte, size)
		o.free <- int32(i)
	}
	return o
}

// Send queues a copy of pkt. It never blocks: it returns false (and counts
// a drop) when the queue is full or pkt is larger than a slot.
func (o *Output) Send(pkt []byte) bool {
	var slot int32
	select {
	case slot = <-o.free:
	default:
		o.drops.Add(1)
		return false
	}
	if len(pkt) > len(o.slots[slot]) {
		o.free <- slot
		o.drops.Add(1)
		return false
	}
	o.lens[slot] = copy(o.slots[slot], pkt)
	o.queue <- slot // cannot block: queue has room for every slot
	return true
}

// Drops returns how many packets Send dropped.
func (o *Output) Drops() uint64 { return o.drops.Load() }

// Sent returns how many packets the writer wrote.
func (o *Output) Sent() uint64 { return o.sent.Load() }

// WriteTo writes queued packets to dev until the pacer stops or a write
// fails with the device closed. Other write errors (the kernel refusing one
// packet) are counted as drops. Run it on its own goroutine.
func (o *Output) WriteTo(dev Device) error {
	bufs := make([][]byte, 1)
	for {
		var slot int32
		select {
		case slot = <-o.queue:
		case <-o.done:
			return nil
		}
		bufs[0] = o.slots[slot][:o.lens[slot]]
		_, err := dev.Write(bufs, 0)
		o.free <- slot
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return err
			}
			o.drops.Add(1)
			continue
		}
		o.sent.Add(1)
	}
}

// readDevice adapts a Device to Input.ReadFrom's read function.
func readDevice(dev Device) func(b []byte) (int, error) {
	bufs := make([][]byte, 1)
	sizes := make([]int, 1)
	return func(b []byte) (int, error) {
		bufs[0] = b
		n, err := dev.Read(bufs, sizes, 0)
		if err != nil || n == 0 {
			return 0, err
		}
		return sizes[0], nil
	}
}
