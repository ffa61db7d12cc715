package verbs_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"runtime"

	"github.com/mrlab/mrlab/verbs"
)

// A client WRITEs 4 KiB into a server's region. It runs in a live lab
// host (mrlab exec h0 -- ./prog); the server's address, rkey and region
// address come from the server (examples/rdma-write sends them in a SEND).
func Example() {
	ctx := context.Background()
	dev, err := verbs.Open(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	mr, _ := pd.AllocMR(4096, verbs.AccessLocalWrite)
	copy(mr.Bytes(), "hello from h0")
	cq, _ := dev.CreateCQ(16)
	qp, _ := dev.CreateQP(verbs.QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq, Transport: verbs.MetaRoCE})
	if err := qp.Connect(ctx, netip.MustParseAddrPort("198.18.1.1:18515")); err != nil {
		log.Fatal(err)
	}
	var peerAddr uint64 // from the server
	var peerRKey uint32
	err = qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: []verbs.SGE{mr.SGE(0, 4096)},
		RemoteAddr: peerAddr, RKey: peerRKey})
	if err != nil {
		log.Fatal(err)
	}
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 { // no system call: the CQ is shared memory
		runtime.Gosched()
	}
	fmt.Println(wc[0].Op, wc[0].Status)
}

// A server listens on a port and accepts one connection into a QP whose
// receive is posted beforehand, so the client's first SEND finds it.
func ExampleListener_Accept() {
	ctx := context.Background()
	dev, err := verbs.Open(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	mr, _ := pd.AllocMR(1<<20, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	cq, _ := dev.CreateCQ(64)
	qp, _ := dev.CreateQP(verbs.QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq})
	if err := qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(0, 4096)}}); err != nil {
		log.Fatal(err)
	}
	ln, err := dev.Listen(pd, 18515, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	if err := ln.Accept(ctx, qp); err != nil {
		log.Fatal(err)
	}
	if err := cq.Wait(ctx); err != nil { // polls 50 us, then blocks on the CQ's eventfd
		log.Fatal(err)
	}
	var wc [1]verbs.WC
	cq.Poll(wc[:])
	fmt.Printf("%v of %d bytes from %v\n", wc[0].Op, wc[0].Bytes, qp.Remote().Addr())
}
