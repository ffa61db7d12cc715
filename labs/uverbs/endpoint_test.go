package uverbs_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/labs/uverbs"
	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
	"github.com/mrlab/mrlab/verbs"
)

// raw is a client speaking the ABI by hand.
type raw struct {
	t    testing.TB
	conn *net.UnixConn
}

func dialRaw(t testing.TB, name string) *raw {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: "@" + name, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &raw{t: t, conn: c}
}

func (r *raw) send(msg []byte, fds ...int) {
	r.t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := r.conn.WriteMsgUnix(msg, oob, nil); err != nil {
		r.t.Fatal(err)
	}
}

// recv reads one reply, or reports that the endpoint hung up.
func (r *raw) recv() (verbsabi.Reply, bool) {
	r.t.Helper()
	buf := make([]byte, verbsabi.MaxMessage)
	oob := make([]byte, verbsabi.OOBSpace())
	r.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, _, _, err := r.conn.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		return verbsabi.Reply{}, false
	}
	fds, _ := verbsabi.ParseRights(oob[:oobn])
	defer verbsabi.CloseFDs(fds)
	rep, err := verbsabi.DecodeReply(buf[:n], len(fds))
	if err != nil {
		r.t.Fatalf("undecodable reply: %v", err)
	}
	return rep, true
}

func (r *raw) hello() {
	r.t.Helper()
	r.send(verbsabi.AppendRequest(nil, &verbsabi.Request{Op: verbsabi.OpHello, Seq: 1, Version: verbsabi.Version, Name: "raw"}))
	if rep, ok := r.recv(); !ok || rep.Code != verbsabi.CodeOK {
		r.t.Fatalf("HELLO: %+v", rep)
	}
}

// closedByEndpoint reports whether the endpoint hung up (after any
// replies it still had to send).
func (r *raw) closedByEndpoint() bool {
	for i := 0; i < 4; i++ {
		if _, ok := r.recv(); !ok {
			return true
		}
	}
	return false
}

// TestMalformedClosesClient: each kind of malformed message gets the
// sender an error reply and a hang-up; the lab and its other clients
// carry on.
func TestMalformedClosesClient(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	good, err := verbs.OpenEndpoint(context.Background(), lab.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	pd, err := good.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	valid := verbsabi.AppendRequest(nil, &verbsabi.Request{Op: verbsabi.OpAllocPD, Seq: 2})
	memfd, err := verbsabi.CreateMemfd("t", 4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(memfd)
	cases := []struct {
		name string
		msg  []byte
		fds  []int
	}{
		{"empty", []byte{}, nil},
		{"short header", valid[:10], nil},
		{"length field wrong", append(append([]byte(nil), valid...), 1, 2, 3), nil},
		{"unknown op", verbsabi.AppendHeader(nil, 0x7f, 2, 0, 0), nil},
		{"nonzero flags", func() []byte { b := append([]byte(nil), valid...); b[2] = 1; return b }(), nil},
		{"body too short for the op", verbsabi.AppendHeader(nil, verbsabi.OpRegMR, 2, 0, 0), nil},
		{"descriptor where none belongs", valid, []int{memfd}},
		{"REG_MR without its descriptor", verbsabi.AppendRequest(nil, &verbsabi.Request{Op: verbsabi.OpRegMR, Seq: 2, PD: 1, Length: 4096}), nil},
		{"too long", make([]byte, verbsabi.MaxMessage+100), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, lab.Endpoints[0])
			r.hello()
			r.send(c.msg, c.fds...)
			if len(c.msg) > 0 {
				rep, ok := r.recv()
				if !ok || rep.Code != verbsabi.CodeMalformed || !strings.Contains(rep.Text, "malformed") {
					t.Fatalf("reply %+v (ok %v), want a malformed-message error", rep, ok)
				}
			}
			if !r.closedByEndpoint() {
				t.Fatal("the endpoint did not hang up")
			}
		})
	}
	// A request before HELLO is refused and closes the client.
	r := dialRaw(t, lab.Endpoints[0])
	r.send(valid)
	if rep, ok := r.recv(); !ok || rep.Code != verbsabi.CodeNotPermitted {
		t.Errorf("request before HELLO: %+v", rep)
	}
	// The well-behaved client never noticed.
	if _, err := pd.AllocMR(4096, verbs.AccessLocalWrite); err != nil {
		t.Fatalf("the good client after the bad ones: %v", err)
	}
	if n := len(lab.Status(t)["h0"]); n != 1 {
		t.Errorf("%d clients on h0, want the good one only", n)
	}
}

// uverbsNetnsElsewhere is a namespace no test process is in.
var uverbsNetnsElsewhere = uverbs.NetnsID{Dev: 1, Ino: 1}

// TestRefusedNamespace: a process whose network namespace is not the
// host's is refused at HELLO, with the reason.
func TestRefusedNamespace(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{Netns: &uverbsNetnsElsewhere})
	_, err := verbs.OpenEndpoint(context.Background(), lab.Endpoints[0])
	if !errors.Is(err, verbs.ErrNotPermitted) || !strings.Contains(err.Error(), "network namespace") {
		t.Fatalf("open from another namespace: %v", err)
	}
	lab.WaitNoClients(t, 5*time.Second)
}

// TestLimits: per-process limits fail with ErrLimit and say which limit.
func TestLimits(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{Limits: verbsabi.Limits{MaxMRBytes: 1 << 20, MaxQPs: 2, MaxCQE: 256, MaxWR: 64, MaxMRs: 3}})
	dev, err := verbs.OpenEndpoint(context.Background(), lab.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if l := dev.Limits(); l.MaxMRBytes != 1<<20 || l.MaxQPs != 2 {
		t.Fatalf("limits %+v", l)
	}
	pd, _ := dev.AllocPD()
	if _, err := pd.AllocMR(768<<10, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	_, err = pd.AllocMR(512<<10, verbs.AccessLocalWrite)
	if !errors.Is(err, verbs.ErrLimit) || !strings.Contains(err.Error(), "registered memory limit") {
		t.Errorf("MR over the byte limit: %v", err)
	}
	if _, err := dev.CreateCQ(1024); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("CQ over MaxCQE: %v", err)
	}
	cq, _ := dev.CreateCQ(256)
	if _, err := dev.CreateQP(verbs.QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq, MaxSend: 128}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("QP over MaxWR: %v", err)
	}
	for i := 0; i < 2; i++ {
		if _, err := dev.CreateQP(verbs.QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq, MaxSend: 32, MaxRecv: 32}); err != nil {
			t.Fatal(err)
		}
	}
	small, _ := dev.CreateCQ(16)
	if _, err := dev.CreateQP(verbs.QPConfig{PD: pd, SendCQ: small, RecvCQ: small, MaxSend: 16, MaxRecv: 16}); !errors.Is(err, verbs.ErrLimit) {
		t.Errorf("third QP over MaxQPs 2: %v", err)
	}
	cq2, _ := dev.CreateCQ(16)
	_ = cq2
	if err := small.Close(); err != nil {
		t.Errorf("closing an unused CQ: %v", err)
	}
	if err := cq.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("closing a CQ in use: %v", err)
	}
	if _, err := dev.Listen(pd, 0, 0); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("listening on port 0: %v", err)
	}
	if _, err := dev.Listen(pd, 5000, 0); err != nil {
		t.Fatal(err)
	}
	other, err := verbs.OpenEndpoint(context.Background(), lab.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	opd, _ := other.AllocPD()
	if _, err := other.Listen(opd, 5000, 0); !errors.Is(err, verbs.ErrBusy) || !strings.Contains(err.Error(), "in use by pid") {
		t.Errorf("second listener on a port: %v", err)
	}
}

// TestLabStopsUnderClients: a lab that stops with clients connected and
// data moving tears down at once; the clients' next calls fail with
// ErrClosed.
func TestLabStopsUnderClients(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{Quiet: true})
	var devs []*verbs.Device
	for i := 0; i < 3; i++ {
		d, err := verbs.OpenEndpoint(context.Background(), lab.Endpoints[i%2])
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs = append(devs, d)
	}
	pd, _ := devs[0].AllocPD()
	if _, err := pd.AllocMR(1<<20, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { lab.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("the lab did not stop with clients connected")
	}
	for i, d := range devs {
		if _, err := d.AllocPD(); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("client %d after the lab stopped: %v", i, err)
		}
	}
}
