package softnic_test

import (
	"fmt"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2"
	"github.com/mrlab/mrlab/workload"
)

// Two hosts wired back to back: h1 accepts connections, h0 dials it and
// WRITEs 8 bytes into h1's region.
func Example() {
	loop := sim.NewLoop()
	pool := packet.NewPool()
	topo, _ := fabric.BackToBack(fabric.BackToBackParams{})
	net, _ := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 1})
	nics := map[string]*softnic.NIC{}
	for _, h := range topo.Hosts {
		nic, err := softnic.New(softnic.Config{Name: h.Name, Addr: h.Addr, Ports: h.Ports, Sched: loop, Pool: pool,
			Protocols: []transport.Protocol{rocev2.NewProtocol(rocev2.Options{})}})
		if err != nil {
			panic(err)
		}
		if err := workload.AttachNIC(net, nic); err != nil {
			panic(err)
		}
		nics[h.Name] = nic
	}
	h0, h1 := nics["h0"], nics["h1"]

	// The responder: a region peers may write, and a listener.
	pd1 := h1.AllocPD()
	dst, _ := pd1.Register(make([]byte, 64), transport.AccessLocalWrite|transport.AccessRemoteWrite)
	h1.Listen(&softnic.ListenOptions{ConnOptions: softnic.ConnOptions{PD: pd1}})

	// The requester: a source region, a completion queue, a connection.
	pd0 := h0.AllocPD()
	src, _ := pd0.Register([]byte("mrlab!!!"), 0)
	cq := h0.CreateCQ(16)
	conn, _ := h0.Dial(h1.Addr(), softnic.ConnOptions{PD: pd0, SendCQ: cq,
		OnState: func(c *softnic.Conn, s transport.State) {
			if s != transport.StateEstablished {
				return
			}
			wr := transport.WorkRequest{ID: 7, Op: transport.OpWrite, NumSGE: 1,
				RemoteAddr: dst.Addr() + 16, RKey: dst.RKey()}
			wr.SGL[0] = src.SGE(0, 8)
			c.PostSend(&wr)
		}})
	cq.OnCompletion(func() {
		var wc [4]softnic.Completion
		for i := range cq.Poll(wc[:]) {
			fmt.Printf("wr %d: %v %v, %d bytes\n", wc[i].ID, wc[i].Op, wc[i].Status, wc[i].Bytes)
		}
		loop.Stop()
	})
	loop.RunUntil(sim.Second)
	fmt.Printf("h1 memory: %q\n", dst.Bytes()[16:24])
	fmt.Println("connection:", conn.State())
	// Output:
	// wr 7: WRITE ok, 8 bytes
	// h1 memory: "mrlab!!!"
	// connection: established
}
