// Package verbs drives the software RDMA NIC of a live mrlab lab host from
// a program running in that host, without the kernel on the data path: the
// way a program drives an RDMA NIC through ibverbs.
//
// A live lab (`sudo mrlab up`) serves a verbs endpoint inside each host's
// network namespace. Run a program there (`sudo mrlab exec h0 -- ./prog`)
// and Open reaches that host's NIC. The calls follow ibverbs: allocate a
// protection domain, register memory, create completion queues and queue
// pairs, connect a QP to a port of another host (or accept one on a
// listener), post work requests, poll completions.
//
// Registered memory is shared with the lab: MR.Bytes is the memory the NIC
// reads WRITE payloads from and places incoming data into, with no copy
// through the kernel. Send, receive and completion queues are rings in
// shared memory: PostSend and Poll are loads and stores, and a busy program
// makes no system call per work request (Device.Stats counts the doorbells
// and waits it did make). The lab keeps each program to its own memory
// and queues and cleans up after it when it exits or is killed.
//
//	dev, err := verbs.Open(ctx)
//	pd, err := dev.AllocPD()
//	mr, err := pd.AllocMR(1<<20, verbs.AccessLocalWrite)
//	cq, err := dev.CreateCQ(128)
//	qp, err := dev.CreateQP(verbs.QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq})
//	err = qp.Connect(ctx, netip.MustParseAddrPort("198.18.1.1:18515"))
//	err = qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: []verbs.SGE{mr.SGE(0, 4096)},
//		RemoteAddr: peerAddr, RKey: peerRKey})
//	var wc [16]verbs.WC
//	for cq.Poll(wc[:]) == 0 {
//	}
//
// When the lab stops (it exits, or is killed), every blocking call and
// every post returns an error matching ErrLabStopped as soon as the
// kernel closes the lab's end of the endpoint socket; Poll cannot return
// an error, so a loop that spins on it checks Device.Err (one atomic
// load).
//
// examples/rdma-write and examples/pingpong are complete programs;
// docs/verbs-abi.md specifies the endpoint's binary interface (version
// ABIVersion) for clients in other languages.
package verbs
