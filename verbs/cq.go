package verbs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/verbsabi"
)

// Opcode is a work request's or completion's operation.
type Opcode uint8

// Operations. OpRecv and OpRecvImm appear only in completions: a receive
// that a SEND (or, with immediate data, a SEND_IMM or WRITE_IMM) consumed.
const (
	OpWrite    Opcode = verbsabi.OpcodeWrite
	OpWriteImm Opcode = verbsabi.OpcodeWriteImm
	OpSend     Opcode = verbsabi.OpcodeSend
	OpSendImm  Opcode = verbsabi.OpcodeSendImm
	OpRead     Opcode = verbsabi.OpcodeRead
	OpRecv     Opcode = verbsabi.OpcodeRecv
	OpRecvImm  Opcode = verbsabi.OpcodeRecvImm
)

var opNames = [...]string{"", "WRITE", "WRITE_IMM", "SEND", "SEND_IMM", "READ", "RECV", "RECV_IMM"}

func (o Opcode) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// Status is a completion's outcome (ibv_wc_status, abridged). Outcomes
// are data, not errors: check WC.Status.
type Status uint8

// Completion statuses.
const (
	StatusSuccess          Status = verbsabi.StatusSuccess
	StatusLocalProtection  Status = verbsabi.StatusLocProt       // a bad lkey, or an SGE outside its region
	StatusRemoteAccess     Status = verbsabi.StatusRemAccess     // the peer refused the rkey, range or permission
	StatusRemoteInvalid    Status = verbsabi.StatusRemInvalidReq // the peer could not parse or place the request
	StatusRNRRetryExceeded Status = verbsabi.StatusRNRRetryExc   // the peer posted no receive, for too long
	StatusRetryExceeded    Status = verbsabi.StatusRetryExc      // the transport gave up retransmitting
	StatusFlushed          Status = verbsabi.StatusFlushed       // the connection closed or failed first
	StatusLocalLength      Status = verbsabi.StatusLocLen        // a SEND was longer than the receive
	StatusLocalQPOperation Status = verbsabi.StatusLocQPOp       // the work request itself was invalid
	StatusGeneral          Status = verbsabi.StatusGeneral
)

var statusNames = [verbsabi.NumStatuses]string{"success", "local protection error", "remote access error",
	"remote invalid request", "RNR retry exceeded", "transport retry exceeded", "flushed", "local length error",
	"local QP operation error", "general error"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// WC is a work completion (ibv_wc).
type WC struct {
	ID     uint64 // the work request's ID
	QP     uint32 // the QP's number (QP.Num)
	Op     Opcode
	Status Status
	Bytes  uint32 // bytes moved; for receives, bytes placed
	Imm    uint32 // immediate data, when HasImm
	HasImm bool
	Stream uint16 // MetaRoCE ordered stream
}

// CQ is a completion queue: a ring in memory shared with the lab, so
// Poll is a few loads and stores, never a system call.
type CQ struct {
	d    *Device
	h    uint32
	mem  []byte
	ring verbsabi.Ring
	efd  *os.File

	mu   sync.Mutex // one poller at a time; guards cons and mem
	cons uint32
	wmu  sync.Mutex // one waiter at a time
}

// CreateCQ creates a completion queue of at least entries entries. A CQ
// must hold every completion its QPs can have outstanding: CreateQP
// fails with ErrInvalid when it would not.
func (d *Device) CreateCQ(entries int) (*CQ, error) {
	if entries < 1 || entries > 1<<30 {
		return nil, &Error{Op: "CREATE_CQ", Err: ErrInvalid, Msg: fmt.Sprintf("CQ of %d entries", entries)}
	}
	r, fds, err := d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpCreateCQ, Entries: uint32(entries)})
	if err != nil {
		return nil, err
	}
	mem, err := verbsabi.Map(fds[0], 0, int(r.Size))
	unix.Close(fds[0])
	if err == nil {
		_, err = verbsabi.NewRing(mem, int(r.Entries), verbsabi.CQESize)
		if err != nil {
			verbsabi.Unmap(mem)
		}
	}
	if err != nil {
		unix.Close(fds[1])
		return nil, fmt.Errorf("verbs: mapping CQ %d: %w", r.Handle, err)
	}
	ring, _ := verbsabi.NewRing(mem, int(r.Entries), verbsabi.CQESize)
	cq := &CQ{d: d, h: r.Handle, mem: mem, ring: ring, efd: os.NewFile(uintptr(fds[1]), "mrlab-verbs-cq-event")}
	d.maps.Store(cq, cq)
	return cq, nil
}

// Entries returns the queue's size.
func (cq *CQ) Entries() int { return cq.ring.Entries() }

// Poll moves up to len(wc) completions into wc, oldest first, and returns
// how many. It never blocks and makes no system call. Once the lab is
// gone it returns 0 forever: a loop that spins on Poll checks Device.Err.
func (cq *CQ) Poll(wc []WC) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.mem == nil {
		return 0
	}
	prod := cq.ring.Producer()
	n := 0
	var e verbsabi.CQE
	for cq.cons != prod && n < len(wc) {
		verbsabi.GetCQE(cq.ring.Entry(cq.cons), &e)
		cq.cons++
		wc[n] = WC{ID: e.ID, QP: e.QP, Op: Opcode(e.Opcode), Status: Status(e.Status), Bytes: e.Bytes, Imm: e.Imm,
			HasImm: e.Flags&verbsabi.CQEFlagImm != 0, Stream: e.Stream}
		if q, ok := cq.d.qps.Load(e.QP); ok {
			q.(*QP).completed(wc[n].Op)
		}
		n++
	}
	if n > 0 {
		cq.ring.SetConsumer(cq.cons)
		cq.d.polled.Add(uint64(n))
	}
	return n
}

// ready reports whether a completion waits.
func (cq *CQ) ready() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.mem != nil && cq.ring.Producer() != cq.cons
}

// arm asks the lab to signal the next completion; false once closed.
func (cq *CQ) arm() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.mem == nil {
		return false
	}
	cq.ring.SetFlag(1)
	return true
}

// Overrun reports whether the CQ overran: completions arrived with the
// ring full and were lost, and the QPs completing on it failed. It cannot
// happen to a process that polls its CQs and posts no more than its
// queues hold.
func (cq *CQ) Overrun() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.mem != nil && atomic.LoadUint32(verbsabi.Word(cq.mem, verbsabi.CQOverrunOff)) != 0
}

// WaitSpin is how long Wait polls before it blocks in the kernel: a
// completion that comes sooner costs no system call.
const WaitSpin = 50 * time.Microsecond

// Wait returns when a completion is ready to Poll, or ctx is done, or the
// endpoint is gone (with Device.Err: ErrLabStopped when the lab died). It
// polls for WaitSpin, then arms the queue and blocks on its event
// channel (the lab signals it with the next completion).
func (cq *CQ) Wait(ctx context.Context) error {
	cq.wmu.Lock()
	defer cq.wmu.Unlock()
	for start := time.Now(); time.Since(start) < WaitSpin; runtime.Gosched() {
		if cq.ready() {
			return nil
		}
	}
	stop := context.AfterFunc(ctx, func() { cq.efd.SetReadDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			cq.efd.SetReadDeadline(time.Time{})
		}
	}()
	var b [8]byte
	for {
		if err := cq.d.Err(); err != nil {
			return err
		}
		if !cq.arm() {
			return &Error{Op: "wait", Err: ErrClosed, Msg: "CQ closed"}
		}
		if cq.ready() {
			return nil
		}
		cq.d.waits.Add(1)
		if _, err := cq.efd.Read(b[:]); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return fmt.Errorf("verbs: waiting on CQ %d: %w", cq.h, err)
		}
		if cq.ready() {
			return nil
		}
	}
}

// wake makes a blocked Wait look again (the device lost its endpoint):
// the same eventfd write the lab makes for a completion.
func (cq *CQ) wake() {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.mem != nil {
		var one = [8]byte{1}
		_, _ = cq.efd.Write(one[:])
	}
}

// Close destroys the queue; it fails with ErrBusy while QPs use it.
func (cq *CQ) Close() error {
	if _, _, err := cq.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpDestroyCQ, CQ: cq.h}); err != nil {
		return err
	}
	if _, ok := cq.d.maps.LoadAndDelete(cq); ok {
		cq.unmap()
	}
	return nil
}

func (cq *CQ) unmap() {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.mem != nil {
		verbsabi.Unmap(cq.mem)
		cq.mem = nil
		cq.efd.Close()
	}
}
