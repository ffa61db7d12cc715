package verbs

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/verbsabi"
)

// Transport is the RDMA transport a connection speaks.
type Transport uint8

// Transports. TransportDefault lets the lab choose (its lab file's
// transport) for Connect; an accepted QP speaks whatever its dialer chose.
const (
	TransportDefault Transport = 0
	MetaRoCE         Transport = verbsabi.TransportMetaRoCE
	RoCEv2           Transport = verbsabi.TransportRoCEv2
)

func (t Transport) String() string {
	switch t {
	case MetaRoCE:
		return "metaroce"
	case RoCEv2:
		return "rocev2"
	case TransportDefault:
		return "default"
	}
	return fmt.Sprintf("Transport(%d)", uint8(t))
}

// ParseTransport parses "metaroce" or "rocev2" ("" is TransportDefault).
func ParseTransport(s string) (Transport, error) {
	switch s {
	case "metaroce":
		return MetaRoCE, nil
	case "rocev2":
		return RoCEv2, nil
	case "", "default":
		return TransportDefault, nil
	}
	return 0, fmt.Errorf("verbs: unknown transport %q (want metaroce or rocev2)", s)
}

// SGE is a scatter-gather element: Length bytes at Addr of the region
// whose lkey is LKey (MR.SGE makes one).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// MaxSGE is the most SGEs a work request may carry.
const MaxSGE = verbsabi.MaxSGE

// SendWR is a send work request (ibv_send_wr): a WRITE, WRITE_IMM,
// SEND, SEND_IMM or READ of the bytes SGL names (for READ, where the
// peer's bytes land).
type SendWR struct {
	ID         uint64 // returned in the completion
	Op         Opcode
	SGL        []SGE
	RemoteAddr uint64 // WRITE, WRITE_IMM, READ: the peer's address (its MR.Addr plus an offset)
	RKey       uint32 // WRITE, WRITE_IMM, READ: the peer region's rkey
	Imm        uint32 // WRITE_IMM, SEND_IMM
	Stream     uint16 // MetaRoCE: the ordered stream within the connection (0 for RoCEv2)
}

// RecvWR is a receive work request (ibv_recv_wr): where an incoming SEND
// is placed.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// QPState is a queue pair's state.
type QPState uint32

// QP states.
const (
	QPReset       QPState = verbsabi.QPReset // created, not connected
	QPConnecting  QPState = verbsabi.QPConnecting
	QPEstablished QPState = verbsabi.QPEstablished
	QPClosed      QPState = verbsabi.QPClosed
	QPError       QPState = verbsabi.QPError
)

func (s QPState) String() string {
	switch s {
	case QPReset:
		return "reset"
	case QPConnecting:
		return "connecting"
	case QPEstablished:
		return "established"
	case QPClosed:
		return "closed"
	case QPError:
		return "error"
	}
	return fmt.Sprintf("QPState(%d)", uint32(s))
}

// QPConfig configures a queue pair.
type QPConfig struct {
	PD *PD
	// SendCQ and RecvCQ receive the completions of sends and receives;
	// they may be the same CQ, which must then hold both queues' entries.
	SendCQ, RecvCQ *CQ
	// Transport is used by Connect (an accepted QP speaks its dialer's).
	Transport Transport
	// MaxSend and MaxRecv are the queues' sizes: the most work of each
	// kind outstanding (posted and not yet polled). Default 64.
	MaxSend, MaxRecv int
}

// QP is a queue pair: send and receive queues that are rings in memory
// shared with the lab, bound to one connection by Connect or
// Listener.Accept. Posting writes the ring and, only while the lab's loop
// is asleep, rings a doorbell.
type QP struct {
	d      *Device
	h      uint32
	cfg    QPConfig
	mem    []byte
	sq, rq workQueue

	mu        sync.Mutex // guards posting and mem
	remote    netip.AddrPort
	connID    uint32
	transport Transport
	closed    bool
	wqe       verbsabi.WQE
}

// workQueue is one of a QP's work queues (send or receive) as the
// application posts to it.
type workQueue struct {
	ring verbsabi.Ring
	prod uint32       // entries posted; published as the producer index
	out  atomic.Int64 // posted and not yet polled
	n    int64        // the most outstanding
	name string       // "send" or "receive", for errors
}

// CreateQP creates a queue pair in the reset state: post receives (and
// sends) at once; they run when it is connected.
func (d *Device) CreateQP(cfg QPConfig) (*QP, error) {
	if cfg.PD == nil || cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, &Error{Op: "CREATE_QP", Err: ErrInvalid, Msg: "a QP needs a PD, a send CQ and a receive CQ"}
	}
	if cfg.MaxSend == 0 {
		cfg.MaxSend = 64
	}
	if cfg.MaxRecv == 0 {
		cfg.MaxRecv = 64
	}
	if cfg.MaxSend < 0 || cfg.MaxRecv < 0 || cfg.MaxSend > 1<<30 || cfg.MaxRecv > 1<<30 {
		return nil, &Error{Op: "CREATE_QP", Err: ErrInvalid, Msg: fmt.Sprintf("queues of %d and %d entries", cfg.MaxSend, cfg.MaxRecv)}
	}
	r, fds, err := d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpCreateQP, PD: cfg.PD.h, SendCQ: cfg.SendCQ.h,
		RecvCQ: cfg.RecvCQ.h, Trans: uint8(cfg.Transport), MaxSend: uint32(cfg.MaxSend), MaxRecv: uint32(cfg.MaxRecv)})
	if err != nil {
		return nil, err
	}
	q := &QP{d: d, h: r.Handle, cfg: cfg}
	q.sq.n, q.sq.name = int64(r.SQEntries), "send"
	q.rq.n, q.rq.name = int64(r.RQEntries), "receive"
	mem, err := verbsabi.Map(fds[0], 0, int(r.Size))
	unix.Close(fds[0])
	if err == nil && (r.RQOffset > r.Size || r.SQOffset > r.RQOffset) {
		err = fmt.Errorf("ring offsets %d and %d outside %d bytes", r.SQOffset, r.RQOffset, r.Size)
	}
	if err == nil {
		if q.sq.ring, err = verbsabi.NewRing(mem[r.SQOffset:r.RQOffset], int(r.SQEntries), verbsabi.WQESize); err == nil {
			q.rq.ring, err = verbsabi.NewRing(mem[r.RQOffset:], int(r.RQEntries), verbsabi.WQESize)
		}
		if err != nil {
			verbsabi.Unmap(mem)
		}
	}
	if err != nil {
		d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpDestroyQP, QP: r.Handle})
		return nil, fmt.Errorf("verbs: mapping QP %d: %w", r.Handle, err)
	}
	q.mem = mem
	d.qps.Store(q.h, q)
	d.maps.Store(q, q)
	return q, nil
}

// Num returns the QP's number (WC.QP names it).
func (q *QP) Num() uint32 { return q.h }

// ConnID returns the connection's id on this host's NIC (the RoCEv2 QPN
// minus 16; `mrlab trace --filter conn=ID` shows its packets' story), or
// 0 before it is connected.
func (q *QP) ConnID() uint32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.connID
}

// Remote returns the peer's address: the address and port dialed, or the
// dialer's address (port 0) for an accepted QP.
func (q *QP) Remote() netip.AddrPort {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.remote
}

// Transport returns the connection's transport once connected (an
// accepted QP speaks its dialer's), else the one configured.
func (q *QP) Transport() Transport {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.transport != TransportDefault {
		return q.transport
	}
	return q.cfg.Transport
}

// QPStats are a QP's connection's counters, as the lab's NIC and
// transport count them.
type QPStats struct {
	TxPackets, RxPackets uint64
	// Retransmits counts data packets sent again, Timeouts retransmission
	// timeouts (a probe's included: a MetaRoCE connection keeps probing the
	// paths of a failed plane, ever less often, so Timeouts grows while it
	// is down even when nothing is resent), ECNEchoes congestion
	// notifications the sender acted on; CEReceived packets that arrived
	// ECN-marked.
	Retransmits, Timeouts, ECNEchoes, CEReceived uint64
}

// Query returns the QP's connection's counters (ibv_query_qp and the
// port counters, in one).
func (q *QP) Query() (QPStats, error) {
	r, _, err := q.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpQueryQP, QP: q.h})
	if err != nil {
		return QPStats{}, err
	}
	return QPStats{TxPackets: r.TxPackets, RxPackets: r.RxPackets, Retransmits: r.Retransmits, Timeouts: r.Timeouts,
		ECNEchoes: r.ECNEchoes, CEReceived: r.CEReceived}, nil
}

// RNRRetryForever is the rnr_retry that never gives up (IB's 7).
const RNRRetryForever = verbsabi.RNRRetryForever

// SetRNRRetry sets how many RNR NAKs in a row (the peer had no receive
// posted) a SEND survives before it completes with StatusRNRRetryExceeded:
// 0..6, or RNRRetryForever, as ibv_modify_qp's rnr_retry. It applies to
// the QP's connection now, or to the one Connect or Accept gives it; a
// QP without it keeps the lab transport's default.
func (q *QP) SetRNRRetry(retry int) error {
	if retry < 0 || retry > RNRRetryForever {
		return &Error{Op: "SET_RNR", Err: ErrInvalid, Msg: fmt.Sprintf("rnr_retry %d: want 0..%d", retry, RNRRetryForever)}
	}
	_, _, err := q.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpSetRNR, QP: q.h, RNRRetry: uint8(retry), RNRMask: verbsabi.RNRSetRetry})
	return err
}

// State returns the QP's state, as the lab last wrote it. Reading it is a
// load from shared memory.
func (q *QP) State() QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mem == nil {
		return QPError
	}
	return QPState(q.sq.ring.Flag())
}

// Connect connects the QP to the listener on port of the host at the
// address, and returns when the connection is established. Canceling
// ctx abandons the attempt and leaves the QP in the error state.
func (q *QP) Connect(ctx context.Context, to netip.AddrPort) error {
	if !to.Addr().Is4() {
		return &Error{Op: "CONNECT", Err: ErrInvalid, Msg: fmt.Sprintf("%v: lab hosts have IPv4 addresses", to)}
	}
	r, _, err := q.d.call(ctx, &verbsabi.Request{Op: verbsabi.OpConnect, QP: q.h, Addr: to.Addr().As4(), Port: to.Port()})
	if err != nil {
		return fmt.Errorf("verbs: connecting QP %d to %v: %w", q.h, to, err)
	}
	q.mu.Lock()
	q.remote, q.connID, q.transport = to, r.ConnID, Transport(r.Trans)
	q.mu.Unlock()
	return nil
}

// PostSend posts work requests in order, all or none: it fails with
// ErrQueueFull if they would have more outstanding than the send queue
// holds, and with ErrInvalid for a malformed one. It makes no system call
// while the lab polls (a doorbell write otherwise).
func (q *QP) PostSend(wrs ...SendWR) error {
	if err := q.begin(&q.sq, "PostSend", len(wrs)); err != nil {
		return err
	}
	for i := range wrs {
		if w := &wrs[i]; w.Op < OpWrite || w.Op > OpRead || len(w.SGL) > MaxSGE {
			q.mu.Unlock()
			return &Error{Op: "PostSend", Err: ErrInvalid, Msg: fmt.Sprintf("work request %d: op %v with %d SGEs", i, w.Op, len(w.SGL))}
		}
	}
	for i := range wrs {
		w := &wrs[i]
		q.wqe = verbsabi.WQE{ID: w.ID, Opcode: uint8(w.Op), NumSGE: uint8(len(w.SGL)), Stream: w.Stream, Imm: w.Imm,
			RemoteAddr: w.RemoteAddr, RKey: w.RKey}
		q.sq.put(&q.wqe, w.SGL)
	}
	q.commit(&q.sq, len(wrs))
	return nil
}

// PostRecv posts receives in order, all or none (see PostSend).
func (q *QP) PostRecv(wrs ...RecvWR) error {
	if err := q.begin(&q.rq, "PostRecv", len(wrs)); err != nil {
		return err
	}
	for i := range wrs {
		if len(wrs[i].SGL) > MaxSGE {
			q.mu.Unlock()
			return &Error{Op: "PostRecv", Err: ErrInvalid, Msg: fmt.Sprintf("receive %d: %d SGEs", i, len(wrs[i].SGL))}
		}
	}
	for i := range wrs {
		w := &wrs[i]
		q.wqe = verbsabi.WQE{ID: w.ID, NumSGE: uint8(len(w.SGL))}
		q.rq.put(&q.wqe, w.SGL)
	}
	q.commit(&q.rq, len(wrs))
	return nil
}

// begin locks the QP to post n requests to wq, or fails (unlocked) when
// the QP is closed or wq has no room for them; op names the call.
func (q *QP) begin(wq *workQueue, op string, n int) error {
	q.mu.Lock()
	if err := q.postable(op); err != nil {
		q.mu.Unlock()
		return err
	}
	if wq.out.Load()+int64(n) > wq.n || int(wq.prod-wq.ring.Consumer())+n > wq.ring.Entries() {
		q.mu.Unlock()
		return &Error{Op: op, Err: ErrQueueFull, Msg: fmt.Sprintf("%s queue of %d entries has %d outstanding", wq.name, wq.n, wq.out.Load())}
	}
	return nil
}

// put writes w, with its scatter/gather list sgl, into the ring's next
// entry.
func (wq *workQueue) put(w *verbsabi.WQE, sgl []SGE) {
	for j, s := range sgl {
		w.SGL[j] = verbsabi.SGE{Addr: s.Addr, Len: s.Length, LKey: s.LKey}
	}
	verbsabi.PutWQE(wq.ring.Entry(wq.prod), w)
	wq.prod++
}

// commit publishes the n requests put since begin, unlocks the QP and
// rings the doorbell.
func (q *QP) commit(wq *workQueue, n int) {
	wq.out.Add(int64(n))
	wq.ring.SetProducer(wq.prod)
	q.mu.Unlock()
	q.d.posted.Add(uint64(n))
	q.d.ring()
}

func (q *QP) postable(op string) error {
	if q.closed || q.mem == nil {
		return &Error{Op: op, Err: ErrClosed, Msg: fmt.Sprintf("QP %d is closed", q.h)}
	}
	return q.d.Err()
}

// completed accounts for a polled completion of this QP.
func (q *QP) completed(op Opcode) {
	if op == OpRecv || op == OpRecvImm {
		q.rq.out.Add(-1)
	} else {
		q.sq.out.Add(-1)
	}
}

// Close destroys the QP: its connection closes (queued work is flushed,
// the peer's fails) and its rings are freed. Completions still to come
// for it are discarded.
func (q *QP) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.mu.Unlock()
	_, _, err := q.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpDestroyQP, QP: q.h})
	if _, ok := q.d.maps.LoadAndDelete(q); ok {
		q.unmap()
	}
	q.d.qps.Delete(q.h)
	return err
}

func (q *QP) unmap() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	if q.mem != nil {
		verbsabi.Unmap(q.mem)
		q.mem = nil
	}
}

// Listener accepts connections on one port of the host's NIC.
type Listener struct {
	d    *Device
	h    uint32
	pd   *PD
	port uint16
}

// Listen listens on port (1..65535) of the host's NIC. Connections are
// accepted into QPs of pd. Up to backlog connections (0: the endpoint's
// default) wait for Accept; more are refused.
func (d *Device) Listen(pd *PD, port uint16, backlog int) (*Listener, error) {
	if backlog < 0 || backlog > 1<<15 {
		return nil, &Error{Op: "LISTEN", Err: ErrInvalid, Msg: fmt.Sprintf("backlog %d", backlog)}
	}
	r, _, err := d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpListen, PD: pd.h, Port: port, Backlog: uint16(backlog)})
	if err != nil {
		return nil, err
	}
	return &Listener{d: d, h: r.Handle, pd: pd, port: port}, nil
}

// Port returns the port listened on.
func (l *Listener) Port() uint16 { return l.port }

// Accept binds the next connection to q (a QP of the listener's PD, in
// the reset state, whose receives may already be posted: they are in
// place before the connection's first message) and returns when it is
// established. Canceling ctx abandons the wait.
func (l *Listener) Accept(ctx context.Context, q *QP) error {
	r, _, err := l.d.call(ctx, &verbsabi.Request{Op: verbsabi.OpAccept, Listener: l.h, QP: q.h})
	if err != nil {
		return fmt.Errorf("verbs: accepting on port %d: %w", l.port, err)
	}
	q.mu.Lock()
	q.remote, q.connID, q.transport = netip.AddrPortFrom(netip.AddrFrom4(r.Peer), 0), r.ConnID, Transport(r.Trans)
	q.mu.Unlock()
	return nil
}

// Close stops listening: waiting connections are closed, pending Accepts
// fail with ErrCanceled.
func (l *Listener) Close() error {
	_, _, err := l.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpStopListen, Listener: l.h})
	return err
}
