// Package uverbs is the lab side of the verbs endpoint: the door through
// which programs inside a live lab host drive that host's software NIC
// directly, as ib_uverbs lets programs drive an RDMA NIC. Each host's
// endpoint is an abstract SOCK_SEQPACKET socket in the host's network
// namespace; a client allocates protection domains, registers memory it
// shares with the lab (a memfd both sides map, so the NIC reads and places
// payload in the client's memory), creates completion queues and queue
// pairs whose work and completion queues are shared-memory rings, and
// connects or listens. docs/verbs-abi.md specifies the protocol; the
// public package verbs is its Go client.
//
// Threading: the NIC, its transports and every client's objects belong to
// the lab's event loop. Each client has three goroutines that only do I/O
// — a reader that decodes control messages and runs each as a closure on
// the loop, a writer that sends replies, and a doorbell reader that asks
// the loop to look at the client's rings — and the loop polls the rings
// itself between events (Set implements the live pacer's Poller), so a
// busy client posts and completes work without a system call.
package uverbs

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/sanitize"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// Loop is the lab's event loop as the endpoint sees it: Post runs a
// closure on the loop goroutine (the live pacer's Post) and fails once
// the loop has stopped; Done is closed when it has (a closure posted just
// before may never run); Now is the loop's time (loop goroutine only).
type Loop interface {
	Post(fn func(now sim.Time)) error
	Done() <-chan struct{}
	Now() sim.Time
}

// DefaultLimits returns the per-process limits of an endpoint.
func DefaultLimits() verbsabi.Limits {
	return verbsabi.Limits{
		MaxMRs: 1024,
		MaxQPs: 256,
		MaxCQs: 256,
		MaxCQE: 1 << 16,
		MaxWR:  4096,
		MaxSGE: verbsabi.MaxSGE,
		// One per QP: libmrlab-ibverbs holds a listener for each QP
		// (its QPN is that port), so QPs per process stop at this.
		MaxListeners: 256,
		MaxBacklog:   64,
		MaxMRBytes:   4 << 30,
		MaxPDs:       256,
	}
}

// DefaultMaxHostQPs is a host's QP limit unless Config.MaxHostQPs: 16
// programs at the per-process limit. With the largest queues (MaxWR
// entries of 128 bytes each way) a QP's rings take 1 MiB of the lab's
// memory, so a host reaches at most 4 GiB of rings, touched on demand.
const DefaultMaxHostQPs = 4096

// MaxClients bounds the clients one endpoint serves at once (each holds
// descriptors and goroutines in the lab process).
const MaxClients = 256

// Config configures one host's endpoint.
type Config struct {
	// Host names the host (status, trace, errors).
	Host string
	// NIC is the host's NIC. Touch it only on the loop.
	NIC *softnic.NIC
	// Netns is the network namespace a client's process must be in; the
	// zero value accepts any (the socket's own namespace scoping then is
	// the only check).
	Netns NetnsID
	// Limits are the per-process limits; zero fields take DefaultLimits'.
	Limits verbsabi.Limits
	// Trace, if set, receives the endpoint's events (clients opening and
	// closing, connections, refusals) in the lab's protocol trace.
	Trace transport.Tracer
	// MaxHostQPs bounds the QPs open at once across every program of the
	// host (their rings are the lab's memory); 0 means DefaultMaxHostQPs.
	MaxHostQPs int
	// Logf, if set, hears about refused clients and I/O errors.
	Logf func(format string, args ...any)
	// Watch, if set, starts following how the lab keeps real time (on
	// the loop) and returns the function that stops and reports it: a
	// client's WATCH and UNWATCH, so a program's figures can say whether
	// the lab kept real time while it measured them. Without it WATCH
	// fails with CodeInvalid.
	Watch func() (stop func() Timing)
}

// Timing is how the lab kept real time over an interval (the live
// runtime's figures): its lab time against the wall clock, its worst
// lateness, and whether that distorts what was measured.
type Timing struct {
	LabTime, WallTime, MaxLateness time.Duration
	Events, EventsLate             uint64
	// Lagging is the runtime's verdict; Limit the fraction of LabTime
	// the lab may fall behind before it is lagging.
	Lagging bool
	Limit   float64
	// LoopStarved says the runtime's loop waited for a CPU beyond Limit
	// (a bound, not part of Lagging): what clients handed the lab may
	// have waited that long before entering it, which MaxLateness does
	// not count.
	LoopStarved bool
}

// MaxWatches bounds a client's open WATCHes.
const MaxWatches = 16

func (c *Config) fill() {
	l, d := &c.Limits, DefaultLimits()
	for _, p := range []struct {
		v *uint32
		d uint32
	}{{&l.MaxMRs, d.MaxMRs}, {&l.MaxQPs, d.MaxQPs}, {&l.MaxCQs, d.MaxCQs},
		{&l.MaxCQE, d.MaxCQE}, {&l.MaxWR, d.MaxWR}, {&l.MaxSGE, d.MaxSGE}, {&l.MaxListeners, d.MaxListeners},
		{&l.MaxBacklog, d.MaxBacklog}, {&l.MaxPDs, d.MaxPDs}} {
		if *p.v == 0 {
			*p.v = p.d
		}
	}
	l.MaxSGE = min(l.MaxSGE, verbsabi.MaxSGE)
	if l.MaxMRBytes == 0 {
		l.MaxMRBytes = d.MaxMRBytes
	}
	if c.MaxHostQPs <= 0 {
		c.MaxHostQPs = DefaultMaxHostQPs
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Endpoint is one host's verbs endpoint.
type Endpoint struct {
	cfg Config
	set *Set
	ln  *net.UnixListener
	rwg sync.WaitGroup // the accept loop and client readers
	wwg sync.WaitGroup // client writers and doorbell readers

	mu     sync.Mutex // guards all and closed
	all    map[*client]bool
	closed bool

	// Loop-goroutine state.
	clients map[uint32]*client
	nextID  uint32
	ports   map[uint16]*listener
	addr    [4]byte
	trans   uint32
	portsUp uint32 // the NIC's ports_up word as clients last saw it (0: not read yet)
	qps     int    // QPs open across the host's clients (Config.MaxHostQPs)
}

// checkPorts reads which of the NIC's links are up and, if that changed,
// tells every client (the doorbell page's ports_up word, and a futex wake
// for those sleeping on it). Run it on the loop.
func (e *Endpoint) checkPorts(now sim.Time) {
	m := e.cfg.NIC.PortsUp() | verbsabi.PortsValid
	if m == e.portsUp {
		return
	}
	first := e.portsUp == 0
	e.portsUp = m
	for _, c := range e.clients {
		c.setPortsUp(m)
	}
	if !first {
		e.tracef(now, 0, "host %s: NIC ports up %#b of %d", e.cfg.Host, m&^verbsabi.PortsValid, e.cfg.NIC.Ports())
	}
}

// Listen opens an endpoint's socket: the abstract SOCK_SEQPACKET socket
// name in the calling thread's network namespace (call it on a thread
// inside the host's namespace; the socket stays there).
func Listen(name string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + name, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("verbs endpoint @%s: %w", name, err)
	}
	// Set on the listener, SO_PASSCRED is on every connection from the
	// moment it exists, so even a client's first message (sent before
	// accept returns) carries its sender's credentials.
	rc, err := ln.SyscallConn()
	var serr error
	if err == nil {
		err = rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) })
	}
	if err = errors.Join(err, serr); err != nil {
		ln.Close()
		return nil, fmt.Errorf("verbs endpoint @%s: SO_PASSCRED: %w", name, err)
	}
	return ln, nil
}

// NetnsID identifies a network namespace: its nsfs inode.
type NetnsID struct{ Dev, Ino uint64 }

// NetnsOf returns the namespace of the file at path: /proc/PID/ns/net, or
// a named namespace's bind mount under /run/netns.
func NetnsOf(path string) (NetnsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return NetnsID{}, fmt.Errorf("network namespace of %s: %w", path, err)
	}
	return NetnsID{Dev: st.Dev, Ino: st.Ino}, nil
}

// peerPID returns the pid of the process at the other end of c.
func peerPID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) { cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, gerr
	}
	return int(cred.Pid), nil
}

// serve accepts clients until the listener closes.
func (e *Endpoint) serve() {
	defer e.rwg.Done()
	for {
		conn, err := e.ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				e.cfg.Logf("verbs endpoint %s: accept: %v", e.cfg.Host, err)
				if isTemporary(err) {
					time.Sleep(10 * time.Millisecond)
					continue
				}
			}
			return
		}
		e.admit(conn)
	}
}

func isTemporary(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// admit checks a new client's namespace and starts its goroutines. A
// refused client is told why in the reply to its HELLO.
func (e *Endpoint) admit(conn *net.UnixConn) {
	c := &client{ep: e, conn: conn, out: make(chan outMsg, 2*e.cfg.Limits.MaxQPs+16)}
	pid, err := peerPID(conn)
	if err == nil {
		err = setPassCred(conn)
	}
	if err != nil {
		c.refused = fmt.Sprintf("cannot identify the connecting process: %v", err)
	} else {
		c.pid = pid
		c.comm = readComm(pid)
		if e.cfg.Netns != (NetnsID{}) {
			c.refused = e.checkNetns(pid, c.comm)
		}
	}
	if c.refused != "" {
		e.cfg.Logf("verbs endpoint %s: refusing a client: %s", e.cfg.Host, c.refused)
	}
	e.mu.Lock()
	if e.closed || len(e.all) >= MaxClients {
		full := !e.closed
		e.mu.Unlock()
		if full {
			e.cfg.Logf("verbs endpoint %s: refusing pid %d: %d clients already open", e.cfg.Host, c.pid, MaxClients)
		}
		conn.Close()
		return
	}
	e.all[c] = true
	e.mu.Unlock()
	e.rwg.Add(1)
	e.wwg.Add(1)
	go c.readLoop()
	go c.writeLoop()
}

// credSpace is the control-message room for the sender's credentials
// (SCM_CREDENTIALS) that the kernel attaches to every message once
// SO_PASSCRED is set.
var credSpace = unix.CmsgSpace(unix.SizeofUcred)

// setPassCred asks the kernel to attach the sender's pid, uid and gid to
// every message read from c. The kernel records them when a message is
// sent, so messages a client sent before this call carry them too.
func setPassCred(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_PASSCRED: %w", serr)
	}
	return nil
}

// senderPID returns the pid in a message's SCM_CREDENTIALS.
func senderPID(oob []byte) (int, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for i := range msgs {
		if msgs[i].Header.Level == unix.SOL_SOCKET && msgs[i].Header.Type == unix.SCM_CREDENTIALS {
			if cred, err := unix.ParseUnixCredentials(&msgs[i]); err == nil && cred.Pid > 0 {
				return int(cred.Pid), true
			}
		}
	}
	return 0, false
}

// checkSender returns why a control message (its control data oob) may
// not drive this host's NIC, "" if it may. It runs for every message,
// not only at accept: the sending process (the kernel's SCM_CREDENTIALS,
// not the pid that connected) must have every thread in the host's
// namespace now. So a process that moved a thread out after HELLO, and a
// process in another host that was passed a connected socket, are
// refused on their next message. A process forked in the host may use
// its parent's session.
func (e *Endpoint) checkSender(c *client, oob []byte) string {
	if e.cfg.Netns == (NetnsID{}) {
		return ""
	}
	pid, ok := senderPID(oob)
	if !ok {
		return "the message carried no sender credentials (SCM_CREDENTIALS)"
	}
	comm := c.comm
	if pid != c.pid {
		comm = readComm(pid)
	}
	why := e.checkNetns(pid, comm)
	if why != "" && pid != c.pid {
		why = fmt.Sprintf("a message on pid %d's session came from another process: %s", c.pid, why)
	}
	return why
}

// checkNetns returns why the process pid may not use this endpoint: a
// thread of it is in another network namespace than the host's (a
// process that moved one thread into this host to reach its socket is
// still in another host). "" means it may.
func (e *Endpoint) checkNetns(pid int, comm string) string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return fmt.Sprintf("cannot list the threads of pid %d: %v", pid, err)
	}
	for _, task := range tasks {
		ns, err := NetnsOf(fmt.Sprintf("/proc/%d/task/%s/ns/net", pid, task.Name()))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // the thread exited meanwhile
			}
			return fmt.Sprintf("cannot read the network namespace of pid %d: %v", pid, err)
		}
		if ns != e.cfg.Netns {
			return fmt.Sprintf("pid %d (%s) is not in host %s's network namespace (thread %s is elsewhere): a host's NIC serves only programs running in that host (mrlab exec %s -- PROGRAM)",
				pid, comm, e.cfg.Host, task.Name(), e.cfg.Host)
		}
	}
	return ""
}

func readComm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return sanitize.Terminal(string(b)) // the process chose it (prctl PR_SET_NAME)
}

// forget removes a closed client.
func (e *Endpoint) forget(c *client) {
	e.mu.Lock()
	delete(e.all, c)
	e.mu.Unlock()
}

// tracef puts the endpoint's events in the lab's protocol
// trace: a connection's events under its id, so `mrlab trace
// --filter conn=N` shows them with the transport's.
func (e *Endpoint) tracef(now sim.Time, conn uint32, format string, args ...any) {
	if e.cfg.Trace != nil {
		e.cfg.Trace.Tracef(now, conn, "verbs: "+format, args...)
	}
}

// shutdown stops accepting and disconnects every client; Set.Close then
// releases what they held.
func (e *Endpoint) shutdown() {
	e.ln.Close()
	e.mu.Lock()
	e.closed = true
	for c := range e.all {
		c.conn.Close()
	}
	e.mu.Unlock()
}

// clientsInOrder returns the clients past HELLO, oldest first.
func (e *Endpoint) clientsInOrder() []*client {
	var out []*client
	for _, c := range e.set.polled {
		if c.ep == e {
			out = append(out, c)
		}
	}
	return out
}
