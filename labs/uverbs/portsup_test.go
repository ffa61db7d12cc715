package uverbs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
)

// TestPortsUp: the doorbell page's ports_up word is the host's links as
// the lab sees them (valid bit | one bit per plane): both planes up at
// HELLO; a link down clears its bit, both down clear both, a link back
// sets its bit again.
func TestPortsUp(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	r := dialRaw(t, lab.Endpoints[0])
	r.send(verbsabi.AppendRequest(nil, &verbsabi.Request{Op: verbsabi.OpHello, Seq: 1, Version: verbsabi.Version, Name: "raw"}))
	page := r.helloPage()
	word := verbsabi.Word(page, verbsabi.PortsUpOff)
	link := func(name string, up bool) {
		t.Helper()
		if err := lab.Pacer.Do(context.Background(), func(now sim.Time) {
			if err := lab.Net.SetLinkUp(now, name, up); err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	// want waits (10 s at most: the loop is real time, the box may be
	// loaded) for the word to read w.
	want := func(what string, w uint32) {
		t.Helper()
		for i := 0; i < 1000 && atomicLoad(word) != w; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if got := atomicLoad(word); got != w {
			t.Fatalf("%s: ports_up %#x, want %#x", what, got, w)
		}
	}
	valid := uint32(verbsabi.PortsValid)
	want("at HELLO", valid|0b11)
	link("p0-h0-h1", false)
	want("plane 0's link down", valid|0b10)
	link("p1-h0-h1", false)
	want("both links down", valid)
	link("p1-h0-h1", true)
	want("plane 1's link back", valid|0b10)
	link("p0-h0-h1", true)
	want("both back", valid|0b11)
}

func atomicLoad(p *uint32) uint32 { return atomic.LoadUint32(p) }

// helloPage reads HELLO's reply and maps its doorbell page (unmapped at
// the test's end).
func (r *raw) helloPage() []byte {
	r.t.Helper()
	buf := make([]byte, verbsabi.MaxMessage)
	oob := make([]byte, verbsabi.OOBSpace())
	r.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, _, _, err := r.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		r.t.Fatal(err)
	}
	fds, err := verbsabi.ParseRights(oob[:oobn])
	if err != nil {
		r.t.Fatal(err)
	}
	defer verbsabi.CloseFDs(fds)
	if rep, err := verbsabi.DecodeReply(buf[:n], len(fds)); err != nil || rep.Code != verbsabi.CodeOK {
		r.t.Fatalf("HELLO: %+v, %v", rep, err)
	}
	page, err := verbsabi.Map(fds[0], 0, verbsabi.DoorbellPageSize)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { verbsabi.Unmap(page) })
	return page
}
