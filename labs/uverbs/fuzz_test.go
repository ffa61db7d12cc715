package uverbs_test

import (
	"testing"

	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
)

// FuzzEndpoint sends one arbitrary message after HELLO: whatever it is,
// that client gets a reply or is closed, and the lab goes on serving (a
// new client's HELLO succeeds). The lab lives for the whole fuzz run.
func FuzzEndpoint(f *testing.F) {
	for _, r := range []verbsabi.Request{
		{Op: verbsabi.OpAllocPD, Seq: 2},
		{Op: verbsabi.OpCreateCQ, Seq: 2, Entries: 64},
		{Op: verbsabi.OpCreateQP, Seq: 2, PD: 1, SendCQ: 2, RecvCQ: 2, MaxSend: 8, MaxRecv: 8},
		{Op: verbsabi.OpListen, Seq: 2, PD: 1, Port: 9},
		{Op: verbsabi.OpConnect, Seq: 2, QP: 3, Addr: [4]byte{198, 18, 0, 2}, Port: 9},
		{Op: verbsabi.OpCancel, Seq: 3, Target: 2},
		{Op: verbsabi.OpDestroyQP, Seq: 2, QP: 1},
	} {
		f.Add(verbsabi.AppendRequest(nil, &r))
	}
	f.Add([]byte{1, 0, 0, 0})
	fuzzLab := uverbstest.Start(f, uverbstest.Options{Quiet: true})
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) == 0 || len(msg) > verbsabi.MaxMessage {
			return // an empty datagram is a hang-up; a long one is cut by the socket
		}
		r := dialRaw(t, fuzzLab.Endpoints[0])
		r.hello()
		r.send(msg)
		r.recv() // a reply or the hang-up
		r.conn.Close()
		again := dialRaw(t, fuzzLab.Endpoints[0])
		again.hello()
	})
}
