package uverbs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
	"github.com/mrlab/mrlab/verbs"
)

// TestHostQPLimit: QPs are limited per process and per host (across its
// programs); a program past either gets ErrLimit (CodeLimit), counted in
// its status, and the QPs it and the others hold keep working.
func TestHostQPLimit(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{MaxHostQPs: 5})
	open := func() (*verbs.Device, *verbs.PD, *verbs.CQ) {
		dev, err := verbs.OpenEndpoint(context.Background(), lab.Endpoints[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := dev.CreateCQ(1024)
		if err != nil {
			t.Fatal(err)
		}
		return dev, pd, cq
	}
	a, apd, acq := open()
	b, bpd, bcq := open()
	var qps []*verbs.QP
	for i := range 5 {
		d, pd, cq := a, apd, acq
		if i%2 == 1 {
			d, pd, cq = b, bpd, bcq
		}
		qp, err := d.CreateQP(verbs.QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq, MaxSend: 16, MaxRecv: 16})
		if err != nil {
			t.Fatalf("QP %d of 5: %v", i, err)
		}
		qps = append(qps, qp)
	}
	if _, err := b.CreateQP(verbs.QPConfig{PD: bpd, SendCQ: bcq, RecvCQ: bcq, MaxSend: 16, MaxRecv: 16}); !errors.Is(err, verbs.ErrLimit) {
		t.Fatalf("6th QP on the host: %v, want ErrLimit", err)
	}
	var limited uint64
	for _, c := range lab.Status(t)["h0"] {
		limited += c.Limited
	}
	if limited != 1 {
		t.Errorf("status counts %d limited requests, want 1", limited)
	}
	// A QP destroyed frees a place on the host for another program.
	if err := qps[0].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateQP(verbs.QPConfig{PD: bpd, SendCQ: bcq, RecvCQ: bcq, MaxSend: 16, MaxRecv: 16}); err != nil {
		t.Fatalf("QP after one was destroyed: %v", err)
	}
}
