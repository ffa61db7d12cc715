package uverbs_test

import (
	"testing"

	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
)

// TestSetRNR: SET_RNR on a QP the client has is answered OK (before the
// QP is connected: the endpoint keeps the policy for its connection); on
// no QP it is NO_OBJECT; a mask or value out of range is a malformed
// message, which closes the client. (The policy's effect is checked end to
// end by ibverbs/ctest/selftest.c in TestIbverbsPrograms, and in the
// transports' TestSetRNR tests.)
func TestSetRNR(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	r := dialRaw(t, lab.Endpoints[0])
	r.hello()
	seq := uint32(1)
	call := func(req verbsabi.Request) verbsabi.Reply {
		t.Helper()
		seq++
		req.Seq = seq
		r.send(verbsabi.AppendRequest(nil, &req))
		rep, ok := r.recv()
		if !ok || rep.Seq != seq {
			t.Fatalf("%v: reply %+v, ok %v", req.Op, rep, ok)
		}
		return rep
	}
	pd := call(verbsabi.Request{Op: verbsabi.OpAllocPD}).Handle
	cq := call(verbsabi.Request{Op: verbsabi.OpCreateCQ, Entries: 64}).Handle
	qp := call(verbsabi.Request{Op: verbsabi.OpCreateQP, PD: pd, SendCQ: cq, RecvCQ: cq, MaxSend: 8, MaxRecv: 8})
	if qp.Code != verbsabi.CodeOK {
		t.Fatalf("CREATE_QP: %+v", qp)
	}
	both := uint8(verbsabi.RNRSetRetry | verbsabi.RNRSetTimer)
	if rep := call(verbsabi.Request{Op: verbsabi.OpSetRNR, QP: qp.Handle, RNRRetry: verbsabi.RNRRetryForever, RNRTimer: 12, RNRMask: both}); rep.Code != verbsabi.CodeOK {
		t.Errorf("SET_RNR on a QP: %+v", rep)
	}
	if rep := call(verbsabi.Request{Op: verbsabi.OpSetRNR, QP: qp.Handle + 1000, RNRRetry: 1, RNRMask: verbsabi.RNRSetRetry}); rep.Code != verbsabi.CodeNoObject {
		t.Errorf("SET_RNR on no QP: %+v, want NO_OBJECT", rep)
	}
	// rnr_retry 8 does not fit IB's 3 bits: the decoder refuses it.
	req := verbsabi.Request{Op: verbsabi.OpSetRNR, Seq: 99, QP: qp.Handle, RNRRetry: 7, RNRMask: verbsabi.RNRSetRetry}
	msg := verbsabi.AppendRequest(nil, &req)
	msg[verbsabi.HeaderSize+4] = 8
	r.send(msg)
	if rep, ok := r.recv(); !ok || rep.Code != verbsabi.CodeMalformed {
		t.Errorf("SET_RNR with rnr_retry 8: %+v, want MALFORMED", rep)
	}
	if !r.closedByEndpoint() {
		t.Error("the endpoint kept a client that sent a malformed SET_RNR")
	}
}
