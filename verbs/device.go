package verbs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/verbsabi"
)

// ABIVersion is the version of the verbs ABI (docs/verbs-abi.md) this
// package speaks.
const ABIVersion = verbsabi.Version

// DefaultEndpoint is the name of the abstract socket a lab host's
// endpoint listens on.
const DefaultEndpoint = verbsabi.SocketName

// Device is an open verbs endpoint: the software RDMA NIC of the lab host
// this process runs in. Its methods are safe for concurrent use; closing
// it releases everything opened through it (the lab closes its
// connections, deregisters its memory and frees its queues).
type Device struct {
	conn *net.UnixConn
	wmu  sync.Mutex // serializes writes to conn

	mu       sync.Mutex // guards the fields below
	seq      uint32
	pending  map[uint32]chan result
	closed   bool
	closeErr error // why the endpoint went away

	done      chan struct{}         // closed when the reader exits
	name      string                // the endpoint's abstract socket name
	lost      atomic.Pointer[error] // why the endpoint went away, once it has (Err)
	closeOnce sync.Once
	closeRes  error
	hello     verbsabi.Reply
	dbPage    []byte
	dbFD      int
	qps       sync.Map // handle -> *QP, for completion accounting
	maps      sync.Map // object -> itself (an unmapper), unmapped by Close

	doorbells, waits, posted, polled atomic.Uint64
	rang                             atomic.Uint32 // the sleep number last rung for
}

// unmapper is an object holding shared memory, unmapped when the device
// closes.
type unmapper interface{ unmap() }

type result struct {
	r   verbsabi.Reply
	fds []int
	err error
}

// EndpointEnv names the environment variable that, when set, names the
// endpoint Open opens instead of DefaultEndpoint (tests run endpoints under
// their own names).
const EndpointEnv = "MRLAB_VERBS_ENDPOINT"

// Open opens the verbs endpoint of the lab host this process runs in
// (run it there with `mrlab exec HOST -- PROGRAM`).
func Open(ctx context.Context) (*Device, error) {
	name := os.Getenv(EndpointEnv)
	if name == "" {
		name = DefaultEndpoint
	}
	return OpenEndpoint(ctx, name)
}

// OpenEndpoint opens the endpoint listening on the abstract socket name
// (tests run endpoints under their own names).
func OpenEndpoint(ctx context.Context, name string) (*Device, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unixpacket", "@"+name)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, &Error{Op: "open", Err: ErrNoEndpoint,
				Msg: fmt.Sprintf("no mrlab verbs endpoint @%s in this network namespace: run the program in a live lab host (mrlab exec HOST -- PROGRAM)", name)}
		}
		return nil, fmt.Errorf("verbs: opening endpoint @%s: %w", name, err)
	}
	d := &Device{conn: c.(*net.UnixConn), pending: map[uint32]chan result{}, done: make(chan struct{}), dbFD: -1, name: name}
	go d.readLoop()
	r, fds, err := d.call(ctx, &verbsabi.Request{Op: verbsabi.OpHello, Version: verbsabi.Version, Name: filepath.Base(os.Args[0])})
	if err != nil {
		d.Close()
		return nil, err
	}
	page, err := verbsabi.Map(fds[0], 0, verbsabi.DoorbellPageSize)
	unix.Close(fds[0])
	if err != nil {
		unix.Close(fds[1])
		d.Close()
		return nil, fmt.Errorf("verbs: mapping the doorbell page: %w", err)
	}
	if *verbsabi.Word(page, 0) != verbsabi.DoorbellMagic {
		verbsabi.Unmap(page)
		unix.Close(fds[1])
		d.Close()
		return nil, fmt.Errorf("verbs: the endpoint's doorbell page has no magic number")
	}
	d.hello, d.dbPage, d.dbFD = r, page, fds[1]
	return d, nil
}

// readLoop delivers replies to their callers until the socket closes.
func (d *Device) readLoop() {
	defer close(d.done)
	buf := make([]byte, verbsabi.MaxMessage+1)
	oob := make([]byte, verbsabi.OOBSpace())
	var why error
	for {
		n, oobn, flags, _, err := d.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			break
		}
		fds, err := verbsabi.ParseRights(oob[:oobn])
		if err == nil && flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			err = verbsabi.ErrTooLarge
		}
		var r verbsabi.Reply
		if err == nil {
			r, err = verbsabi.DecodeReply(buf[:n], len(fds))
		}
		if err != nil {
			verbsabi.CloseFDs(fds)
			why = fmt.Errorf("verbs: undecodable reply from the endpoint: %w", err)
			break
		}
		if r.Code == verbsabi.CodeMalformed {
			// The endpoint is closing this client.
			why = codeError(r.Op.String(), r.Code, r.Text)
		}
		d.mu.Lock()
		ch := d.pending[r.Seq]
		delete(d.pending, r.Seq)
		d.mu.Unlock()
		if ch == nil {
			verbsabi.CloseFDs(fds) // its caller gave up
			continue
		}
		ch <- result{r: r, fds: fds}
	}
	d.mu.Lock()
	closing := d.closed
	d.mu.Unlock()
	if why == nil && !closing {
		why = d.whyGone()
	}
	d.mu.Lock()
	d.closed = true
	if d.closeErr == nil {
		d.closeErr = why
	}
	err := d.closeErr
	for seq, ch := range d.pending {
		ch <- result{err: err}
		delete(d.pending, seq)
	}
	d.mu.Unlock()
	d.lose(err)
}

// whyGone says why the endpoint closed a session this process did not
// close: if nothing listens on the endpoint's name any more, the lab
// stopped (it exited or was killed: the kernel closed its sockets);
// otherwise the endpoint ended this session.
//
// A dying lab's kernel closes its descriptors one by one, so the listener
// may still take a connection for a moment after this session's socket
// closed: a probe that connects waits up to probeWait for the endpoint to
// hang up on it too. A live endpoint keeps a new connection open waiting
// for its HELLO.
func (d *Device) whyGone() error {
	stopped := &Error{Op: "endpoint", Err: ErrLabStopped,
		Msg: fmt.Sprintf("the lab stopped: its verbs endpoint @%s in this host is gone (the lab process exited or was killed)", d.name)}
	c, err := net.Dial("unixpacket", "@"+d.name)
	if err != nil {
		return stopped
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(probeWait))
	var b [1]byte
	if _, err := c.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		return stopped // hung up on the probe: the listener went away
	}
	return &Error{Op: "endpoint", Err: ErrClosed, Msg: "the endpoint closed this session (the lab is stopping, or it refused this process)"}
}

// probeWait is how long whyGone's probe waits for a dying lab to hang up.
const probeWait = 200 * time.Millisecond

// lose records why the endpoint is gone and wakes every CQ waiter: a
// program blocked in CQ.Wait or spinning on Poll and Err learns it at once.
func (d *Device) lose(err error) {
	if err == nil || !d.lost.CompareAndSwap(nil, &err) {
		return
	}
	d.maps.Range(func(k, _ any) bool {
		if cq, ok := k.(*CQ); ok {
			cq.wake()
		}
		return true
	})
}

// Err returns nil while the endpoint serves this device, and once it does
// not, why: an error matching ErrLabStopped when the lab stopped (exited
// or was killed), ErrClosed when the device was closed or the endpoint
// ended the session. It is one atomic load: a program that spins on
// CQ.Poll (which cannot return an error) checks it in its loop. Every
// blocking call (CQ.Wait, QP.Connect, Listener.Accept, the control calls)
// and every post returns this error once it is set.
func (d *Device) Err() error {
	if p := d.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// call sends a request and waits for its reply. A canceled CONNECT or
// ACCEPT is canceled at the endpoint too (CANCEL) before call returns.
func (d *Device) call(ctx context.Context, req *verbsabi.Request, fds ...int) (verbsabi.Reply, []int, error) {
	ch := make(chan result, 1)
	d.mu.Lock()
	if d.closed {
		err := d.closeErr
		d.mu.Unlock()
		return verbsabi.Reply{}, nil, err
	}
	d.seq++
	req.Seq = d.seq
	d.pending[req.Seq] = ch
	d.mu.Unlock()
	msg := verbsabi.AppendRequest(nil, req)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	d.wmu.Lock()
	_, _, err := d.conn.WriteMsgUnix(msg, oob, nil)
	d.wmu.Unlock()
	if err != nil {
		// The endpoint is gone (it closed the session, or the lab
		// stopped): the reader sees it too and says why.
		d.forget(req.Seq)
		d.conn.Close()
		<-d.done
		d.mu.Lock()
		why := d.closeErr
		d.mu.Unlock()
		return verbsabi.Reply{}, nil, fmt.Errorf("verbs: %v: %w (%v)", req.Op, why, err)
	}
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		if req.Op != verbsabi.OpConnect && req.Op != verbsabi.OpAccept {
			d.forget(req.Seq)
			return verbsabi.Reply{}, nil, ctx.Err()
		}
		_, _, _ = d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpCancel, Target: req.Seq})
		res = <-ch
		if res.err == nil && res.r.Code == verbsabi.CodeCanceled {
			return verbsabi.Reply{}, nil, ctx.Err()
		}
	}
	if res.err != nil {
		return verbsabi.Reply{}, nil, res.err
	}
	if res.r.Code != verbsabi.CodeOK {
		return res.r, nil, codeError(req.Op.String(), res.r.Code, res.r.Text)
	}
	return res.r, res.fds, nil
}

// forget drops a pending request whose caller gave up; a late reply's
// descriptors are closed by the reader.
func (d *Device) forget(seq uint32) {
	d.mu.Lock()
	delete(d.pending, seq)
	d.mu.Unlock()
}

// ring tells the endpoint about new work if it is not polling: the only
// system call on the posting path, made at most once per sleep of the
// lab's loop.
func (d *Device) ring() {
	if w := atomic.LoadUint32(verbsabi.Word(d.dbPage, verbsabi.NeedWakeupOff)); w != 0 && d.rang.Swap(w) != w {
		verbsabi.Signal(d.dbFD)
		d.doorbells.Add(1)
	}
}

// Close closes the device and everything opened through it: the lab
// closes its connections (peers see them fail), deregisters its memory
// and frees its queues. Memory of its regions must not be used afterwards.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		if d.closeErr == nil {
			d.closeErr = &Error{Op: "device", Err: ErrClosed, Msg: "device closed"}
		}
		d.mu.Unlock()
		d.closeRes = d.conn.Close()
		<-d.done
		d.lose(d.closeErr)
		d.maps.Range(func(k, _ any) bool {
			if u, ok := d.maps.LoadAndDelete(k); ok {
				u.(unmapper).unmap()
			}
			return true
		})
		if d.dbPage != nil {
			verbsabi.Unmap(d.dbPage)
		}
		if d.dbFD >= 0 {
			unix.Close(d.dbFD)
		}
	})
	return d.closeRes
}

// Host returns the lab host's name.
func (d *Device) Host() string { return d.hello.Host }

// Addr returns the host's (the NIC's) address.
func (d *Device) Addr() netip.Addr { return netip.AddrFrom4(d.hello.HostAddr) }

// PathMTU returns the largest payload the NIC puts in one packet.
func (d *Device) PathMTU() int { return int(d.hello.PathMTU) }

// Ports returns the NIC's ports (one per plane).
func (d *Device) Ports() int { return int(d.hello.Ports) }

// LineRate returns each port's line rate in bits per second.
func (d *Device) LineRate() float64 { return float64(d.hello.LineRate) }

// Limits are the endpoint's per-process limits.
type Limits struct {
	MaxPDs, MaxMRs, MaxQPs, MaxCQs int
	MaxCQE                         int // entries of one CQ
	MaxWR                          int // entries of one send or receive queue
	MaxSGE                         int // scatter-gather elements of one work request
	MaxListeners                   int
	MaxBacklog                     int
	MaxMRBytes                     int64 // bytes registered at once
}

// Limits returns the endpoint's per-process limits.
func (d *Device) Limits() Limits {
	l := &d.hello.Limits
	return Limits{MaxPDs: int(l.MaxPDs), MaxMRs: int(l.MaxMRs), MaxQPs: int(l.MaxQPs), MaxCQs: int(l.MaxCQs),
		MaxCQE: int(l.MaxCQE), MaxWR: int(l.MaxWR), MaxSGE: int(l.MaxSGE), MaxListeners: int(l.MaxListeners),
		MaxBacklog: int(l.MaxBacklog), MaxMRBytes: int64(min(l.MaxMRBytes, 1<<62))}
}

// Stats count what this process did through the device. Doorbells and
// Waits are its only system calls on the data path: a busy client that
// polls its CQs makes neither.
type Stats struct {
	Posted    uint64 // work requests posted
	Polled    uint64 // completions polled
	Doorbells uint64 // doorbell rings (the lab's loop was not polling)
	Waits     uint64 // CQ waits that blocked in the kernel
}

// Stats returns the device's counters.
func (d *Device) Stats() Stats {
	return Stats{Posted: d.posted.Load(), Polled: d.polled.Load(), Doorbells: d.doorbells.Load(), Waits: d.waits.Load()}
}

// Transports reports which transports the host's NIC speaks.
func (d *Device) Transports() []Transport {
	var out []Transport
	for _, t := range []Transport{MetaRoCE, RoCEv2} {
		if d.hello.Transports&(1<<uint(t)) != 0 {
			out = append(out, t)
		}
	}
	return out
}
