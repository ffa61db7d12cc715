package live

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// pipeDevice is a fake Device: the test plays the host kernel. Packets the
// "kernel" sends are pushed with Inject; packets the lab writes to the
// kernel arrive on Out.
type pipeDevice struct {
	in     chan []byte
	Out    chan []byte
	closed chan struct{}
	once   sync.Once
}

var _ Device = (*pipeDevice)(nil)

func newPipe() *pipeDevice {
	return &pipeDevice{in: make(chan []byte, 64), Out: make(chan []byte, 64), closed: make(chan struct{})}
}

func (d *pipeDevice) Inject(p []byte) { d.in <- p }

func (d *pipeDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	select {
	case p := <-d.in:
		sizes[0] = copy(bufs[0][offset:], p)
		return 1, nil
	case <-d.closed:
		return 0, os.ErrClosed
	}
}

func (d *pipeDevice) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		c := append([]byte(nil), b[offset:]...)
		select {
		case d.Out <- c:
		case <-d.closed:
			return i, os.ErrClosed
		}
	}
	return len(bufs), nil
}

func (d *pipeDevice) BatchSize() int { return 1 }
func (d *pipeDevice) MTU() int       { return 1500 }
func (d *pipeDevice) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

// wireEngine is a stand-in Engine: every host hangs off one ideal switch;
// a packet from a kernel reaches the kernel of the host owning its IPv4
// destination after Delay. Links are named "h<i>"; taking one down drops
// what its host sends.
type wireEngine struct {
	hosts []HostSpec
	Delay sim.Time

	loop     *sim.Loop
	arriveFn sim.Func
	deliver  func(int, sim.Time, []byte)
	down     []bool
	dropped  uint64
	fwd      uint64

	// A perf run here does nothing but last its Duration of lab time
	// (unless cancelled); busyEvents more events of busy each run meanwhile.
	perfOn     bool
	perfTimer  sim.Timer
	busy       time.Duration
	busyEvents int
}

func newWireEngine(n int, delay sim.Time) *wireEngine {
	e := &wireEngine{Delay: delay, down: make([]bool, n)}
	for i := 0; i < n; i++ {
		e.hosts = append(e.hosts, HostSpec{Name: fmt.Sprintf("h%d", i), Addr: netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})})
	}
	return e
}

func (e *wireEngine) Hosts() []HostSpec { return e.hosts }

func (e *wireEngine) Start(loop *sim.Loop, _ *packet.Pool, deliver func(int, sim.Time, []byte)) error {
	e.loop, e.deliver = loop, deliver
	e.arriveFn = e.arrive // one method value, not one per packet
	return nil
}

func (e *wireEngine) arrive(now sim.Time, arg any) {
	p := arg.(*packet.Buffer)
	e.deliver(p.Hop, now, p.Data())
	p.Free()
}

func (e *wireEngine) FromKernel(host int, now sim.Time, p *packet.Buffer) {
	d := p.Data()
	if len(d) < 20 || e.down[host] {
		e.dropped++
		p.Free()
		return
	}
	dst := netip.AddrFrom4([4]byte(d[16:20]))
	for i, h := range e.hosts {
		if h.Addr == dst {
			p.Hop = i
			p.Timer.Init(e.arriveFn, p)
			e.loop.Arm(&p.Timer, now+e.Delay)
			e.fwd++
			return
		}
	}
	e.dropped++
	p.Free()
}

func (e *wireEngine) Fault(_ sim.Time, f FaultRequest) error {
	if f.Target != "link" {
		return fmt.Errorf("fault %s: only links in the wire engine", f.Target)
	}
	for i, h := range e.hosts {
		if h.Name == f.Name {
			switch f.Action {
			case "down":
				e.down[i] = true
			case "up":
				e.down[i] = false
			default:
				return fmt.Errorf("fault link %s: unknown action %q", f.Name, f.Action)
			}
			return nil
		}
	}
	return fmt.Errorf("no link %q", f.Name)
}

func (e *wireEngine) Perf(now sim.Time, req PerfRequest, done func(PerfResult)) (func(error), error) {
	if req.Duration == 0 {
		return nil, fmt.Errorf("the wire engine runs only timed perf runs")
	}
	if e.perfOn {
		return nil, errPerfBusy
	}
	e.perfOn = true
	finish := func(status string) {
		if !e.perfOn {
			return
		}
		e.perfOn = false
		e.loop.Disarm(&e.perfTimer)
		done(PerfResult{Request: req, Status: status, Elapsed: req.Duration, Verified: true})
	}
	e.perfTimer.Init(func(sim.Time, any) { finish("ok") }, nil)
	e.loop.Arm(&e.perfTimer, now+sim.Time(req.Duration))
	for i := 1; i <= e.busyEvents; i++ {
		t := new(sim.Timer)
		t.Init(func(sim.Time, any) { spin(e.busy) }, nil)
		e.loop.Arm(t, now+sim.Time(i)*sim.Time(req.Duration)/sim.Time(e.busyEvents+1))
	}
	return func(why error) { finish(why.Error()) }, nil
}

// spin keeps the loop goroutine busy for d of wall time: a lab that
// cannot keep real time.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

func (e *wireEngine) Status(sim.Time) EngineStatus {
	s := EngineStatus{Planes: 1, Counters: map[string]uint64{"forwarded": e.fwd, "dropped": e.dropped}}
	for i, h := range e.hosts {
		s.Links = append(s.Links, LinkStatus{Name: h.Name, Up: !e.down[i]})
	}
	return s
}

// ipPacket returns a minimal IPv4 packet from src to dst with n payload bytes.
func ipPacket(src, dst netip.Addr, n int) []byte {
	b := make([]byte, 20+n)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8] = 64
	b[9] = 17
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	for i := 20; i < len(b); i++ {
		b[i] = byte(i)
	}
	return b
}
