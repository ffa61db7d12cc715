package verbsabi

import (
	"bytes"
	"testing"
)

// seedRequests is one valid request of every op.
func seedRequests() []Request {
	return []Request{
		{Op: OpHello, Seq: 1, Version: Version, Name: "rdma-write"},
		{Op: OpAllocPD, Seq: 2},
		{Op: OpDeallocPD, Seq: 3, PD: 1},
		{Op: OpRegMR, Seq: 4, PD: 1, Access: AccessLocalWrite | AccessRemoteWrite, Offset: 4096, Length: 1 << 20},
		{Op: OpDeregMR, Seq: 5, Key: 0x1ab},
		{Op: OpCreateCQ, Seq: 6, Entries: 128},
		{Op: OpDestroyCQ, Seq: 7, CQ: 2},
		{Op: OpCreateQP, Seq: 8, PD: 1, SendCQ: 2, RecvCQ: 2, Trans: TransportRoCEv2, MaxSend: 64, MaxRecv: 32},
		{Op: OpDestroyQP, Seq: 9, QP: 3},
		{Op: OpConnect, Seq: 10, QP: 3, Addr: [4]byte{198, 18, 1, 1}, Port: 18515},
		{Op: OpListen, Seq: 11, PD: 1, Port: 18515, Backlog: 8},
		{Op: OpAccept, Seq: 12, Listener: 4, QP: 3},
		{Op: OpStopListen, Seq: 13, Listener: 4},
		{Op: OpCancel, Seq: 14, Target: 10},
		{Op: OpWatch, Seq: 15},
		{Op: OpUnwatch, Seq: 16, Watch: 5},
		{Op: OpQueryQP, Seq: 17, QP: 3},
		{Op: OpRegMRAt, Seq: 18, PD: 1, Access: AccessLocalWrite, Offset: 0x7f00_1234_5010, Length: 1000, IOVA: 0x7f00_1234_5010},
		{Op: OpSetRNR, Seq: 19, QP: 3, RNRRetry: RNRRetryForever, RNRTimer: 12, RNRMask: RNRSetRetry | RNRSetTimer},
	}
}

// TestRequestRoundTrip encodes and decodes every op.
func TestRequestRoundTrip(t *testing.T) {
	for _, r := range seedRequests() {
		msg := AppendRequest(nil, &r)
		got, err := DecodeRequest(msg, RequestFDs(r.Op))
		if err != nil {
			t.Fatalf("%v: %v", r.Op, err)
		}
		if got != r {
			t.Errorf("%v: decoded %+v, want %+v", r.Op, got, r)
		}
		if _, err := DecodeRequest(msg, RequestFDs(r.Op)+1); err == nil {
			t.Errorf("%v: accepted with a descriptor too many", r.Op)
		}
	}
}

// FuzzDecodeRequest: the endpoint's decoder never panics, and whatever it
// accepts re-encodes to exactly the bytes it read (no field ignored, no
// slack accepted).
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range seedRequests() {
		f.Add(AppendRequest(nil, &r), uint8(RequestFDs(r.Op)))
	}
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, msg []byte, nfds uint8) {
		r, err := DecodeRequest(msg, int(nfds))
		if err != nil {
			return
		}
		again := AppendRequest(nil, &r)
		if !bytes.Equal(again, msg) {
			t.Fatalf("accepted %x, which re-encodes as %x", msg, again)
		}
	})
}

// FuzzDecodeReply: the client's decoder never panics on what an endpoint
// (or anything at its address) sends.
func FuzzDecodeReply(f *testing.F) {
	f.Add(AppendReply(nil, &Reply{Op: OpHello, Seq: 1, Version: Version, Host: "h0", Limits: Limits{MaxQPs: 4}}), uint8(2))
	f.Add(AppendReply(nil, &Reply{Op: OpCreateQP, Seq: 2, Handle: 3, SQEntries: 64, RQEntries: 64, RQOffset: 12288, Size: 24576}), uint8(1))
	f.Add(AppendReply(nil, &Reply{Op: OpConnect, Seq: 3, Code: CodeConnFailed, Text: "nothing there"}), uint8(0))
	f.Add(AppendReply(nil, &Reply{Op: OpAccept, Seq: 4, ConnID: 7, Peer: [4]byte{198, 18, 0, 1}, Trans: TransportRoCEv2}), uint8(0))
	f.Add(AppendReply(nil, &Reply{Op: OpUnwatch, Seq: 5, LabNs: 1e9, WallNs: 1.02e9, MaxLateNs: 2e7, Events: 9, EventsLate: 3, Lagging: true, LoopStarved: true, LimitPPM: 10000}), uint8(0))
	f.Fuzz(func(t *testing.T, msg []byte, nfds uint8) {
		r, err := DecodeReply(msg, int(nfds))
		if err != nil || r.Code != CodeOK {
			return
		}
		again := AppendReply(nil, &r)
		if len(again) != len(msg) {
			t.Fatalf("accepted %d bytes, re-encoded as %d", len(msg), len(again))
		}
	})
}

// TestRingIndices: a ring's entries stay inside its memory whatever index
// the other side writes.
func TestRingIndices(t *testing.T) {
	mem := make([]byte, RingBytes(8, WQESize))
	r, err := NewRing(mem, 8, WQESize)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []uint32{0, 7, 8, 1<<32 - 1, 0xdeadbeef} {
		e := r.Entry(i)
		if len(e) != WQESize {
			t.Fatalf("entry %d is %d bytes", i, len(e))
		}
	}
	if _, err := NewRing(mem, 12, WQESize); err == nil {
		t.Error("a ring of 12 entries accepted")
	}
	if _, err := NewRing(mem[:100], 8, WQESize); err == nil {
		t.Error("a ring larger than its memory accepted")
	}
	w := WQE{ID: 1, Opcode: OpcodeWriteImm, NumSGE: 2, Stream: 3, Imm: 4, RemoteAddr: 5, RKey: 6,
		SGL: [MaxSGE]SGE{{Addr: 7, Len: 8, LKey: 9}, {Addr: 10, Len: 11, LKey: 12}}}
	PutWQE(r.Entry(3), &w)
	var got WQE
	GetWQE(r.Entry(3), &got)
	if got != w {
		t.Errorf("WQE round trip: %+v", got)
	}
	c := CQE{ID: 1, QP: 2, Opcode: OpcodeRecvImm, Status: StatusFlushed, Flags: CQEFlagImm, Bytes: 3, Imm: 4, Stream: 5}
	b := make([]byte, CQESize)
	PutCQE(b, &c)
	var gc CQE
	GetCQE(b, &gc)
	if gc != c {
		t.Errorf("CQE round trip: %+v", gc)
	}
}
