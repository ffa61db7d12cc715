package verbs

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
)

// connectedPair connects a QP on the lab's host 0 to one on host 1 and
// returns host 0's QP and CQ (one CQ for both of its queues).
func connectedPair(t *testing.T, lab *uverbstest.Lab) (*QP, *CQ) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qpOn := func(i int) (*Device, *PD, *QP, *CQ) {
		d, err := OpenEndpoint(ctx, lab.Endpoints[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(64)
		if err != nil {
			t.Fatal(err)
		}
		q, err := d.CreateQP(QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq, MaxSend: 8, MaxRecv: 8})
		if err != nil {
			t.Fatal(err)
		}
		return d, pd, q, cq
	}
	_, _, q0, cq0 := qpOn(0)
	d1, pd1, q1, _ := qpOn(1)
	ln, err := d1.Listen(pd1, 4100, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan error, 1)
	go func() { accepted <- ln.Accept(ctx, q1) }()
	if err := q0.Connect(ctx, netip.AddrPortFrom(d1.Addr(), 4100)); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	return q0, cq0
}

// putRaw writes WQE w into work queue wq's ring as a program not using
// this package could, and rings the doorbell.
func putRaw(q *QP, wq *workQueue, w verbsabi.WQE) {
	q.mu.Lock()
	verbsabi.PutWQE(wq.ring.Entry(wq.prod), &w)
	wq.prod++
	wq.out.Add(1)
	wq.ring.SetProducer(wq.prod)
	q.mu.Unlock()
	q.d.ring()
}

func pollOne(t *testing.T, cq *CQ) WC {
	t.Helper()
	wc := make([]WC, 1)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cq.Poll(wc) == 1 {
			return wc[0]
		}
	}
	t.Fatal("no completion in 5s")
	return WC{}
}

// TestDrainRefusesBadWQEs: the lab drains each ring with one loop (the
// send ring's entries become sends, the receive ring's receives); a WQE
// no transport can take completes at once on its queue's CQ with
// StatusLocalQPOperation (a receive as OpRecv), and work after it still
// runs.
func TestDrainRefusesBadWQEs(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	q, cq := connectedPair(t, lab)
	for _, tc := range []struct {
		name   string
		wq     *workQueue
		wqe    verbsabi.WQE
		wantOp Opcode
	}{
		{"send opcode unknown", &q.sq, verbsabi.WQE{ID: 7, Opcode: 99}, Opcode(99)},
		{"send with too many SGEs", &q.sq, verbsabi.WQE{ID: 8, Opcode: uint8(OpSend), NumSGE: verbsabi.MaxSGE + 1}, OpSend},
		{"receive with an opcode", &q.rq, verbsabi.WQE{ID: 9, Opcode: uint8(OpSend)}, OpRecv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			putRaw(q, tc.wq, tc.wqe)
			wc := pollOne(t, cq)
			if wc.ID != tc.wqe.ID || wc.Status != StatusLocalQPOperation || wc.Op != tc.wantOp {
				t.Errorf("completion %+v, want ID %d op %v status %v", wc, tc.wqe.ID, tc.wantOp, StatusLocalQPOperation)
			}
		})
	}
	// The queue still works: a 0-byte receive is taken, not refused.
	if err := q.PostRecv(RecvWR{ID: 10}); err != nil {
		t.Fatal(err)
	}
	if s := q.State(); s == QPError {
		t.Errorf("QP %v after refused WQEs", s)
	}
}

// TestDrainBreaksOnBadProducer: a producer index more than a ring's size
// ahead of what the lab took (a corrupt or hostile program) fails the QP,
// for either ring.
func TestDrainBreaksOnBadProducer(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	for _, ring := range []string{"send", "receive"} {
		t.Run(ring, func(t *testing.T) {
			q, _ := connectedPair(t, lab)
			wq := &q.sq
			if ring == "receive" {
				wq = &q.rq
			}
			q.mu.Lock()
			wq.ring.SetProducer(wq.prod + uint32(wq.ring.Entries()) + 1)
			q.mu.Unlock()
			q.d.ring()
			for end := time.Now().Add(5 * time.Second); q.State() != QPError; time.Sleep(time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("QP %v, want %v after a bad %s producer index", q.State(), QPError, ring)
				}
			}
		})
	}
}

// TestConnectAcceptNeedIdleQP: CONNECT and ACCEPT refuse a QP that is
// already connected, naming it, and ACCEPT a QP of another protection
// domain than its listener's.
func TestConnectAcceptNeedIdleQP(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	q, _ := connectedPair(t, lab)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	busy := "is already connected or connecting"
	if err := q.Connect(ctx, netip.AddrPortFrom(lab.NICs[1].Addr(), 4100)); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), busy) {
		t.Errorf("CONNECT on a connected QP: %v", err)
	}
	ln, err := q.d.Listen(q.cfg.PD, 4101, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := ln.Accept(ctx, q); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), busy) {
		t.Errorf("ACCEPT onto a connected QP: %v", err)
	}
	pd2, err := q.d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := q.d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	other, err := q.d.CreateQP(QPConfig{PD: pd2, SendCQ: cq, RecvCQ: cq, MaxSend: 4, MaxRecv: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Accept(ctx, other); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "protection domain") {
		t.Errorf("ACCEPT onto another PD's QP: %v", err)
	}
}
