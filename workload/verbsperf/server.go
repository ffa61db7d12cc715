package verbsperf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mrlab/mrlab/verbs"
)

// Serve accepts one client on port (0: the first free one from
// DefaultPort up) and serves its test until the client says it is done.
// listening, if set, learns the port once it listens. It returns what the
// server checked.
//
// The steps: listen and accept, read the hello (acceptHello), offer the
// region (ready), receive and check messages to the client's fin
// (receive), answer the fin with what was checked (finish).
func Serve(ctx context.Context, dev *verbs.Device, port uint16, listening func(port uint16)) (*Result, error) {
	// The server does not know the depth before the hello: it sizes its
	// queues for the most a client may ask.
	pre := &Spec{Depth: 1024}
	s, err := newSide(dev, pre, pre.Depth)
	if err != nil {
		return nil, err
	}
	if err := s.recvCtl(helloOff); err != nil {
		return nil, err
	}
	ln, port, err := listen(dev, s.pd, port)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	if listening != nil {
		listening(port)
	}
	if err := ln.Accept(ctx, s.qp); err != nil {
		return nil, err
	}
	v, err := acceptHello(ctx, s)
	if err != nil {
		return nil, err
	}
	if v.arrives() {
		// The client has up to its depth of messages uncredited: all
		// in flight once every arrived one is credited.
		s.pace = newPacer(v.spec.Depth, func() (uint64, uint64) { return v.n, uint64(v.spec.Depth) })
	} else {
		// Nothing arrives but the client's fin: wait for it in the
		// kernel rather than spin.
		s.ev = true
	}
	s.looks = 0
	cpu0 := processCPU()
	if err := v.ready(); err != nil {
		return nil, err
	}
	err = v.receive(ctx)
	v.res.CPU = cpuSince(cpu0)
	v.res.noteWaits(s)
	if err != nil {
		return v.res, err
	}
	return v.finish(ctx)
}

// listen listens on port or, for port 0, on the first free port from
// DefaultPort up, and returns the port it listens on.
func listen(dev *verbs.Device, pd *verbs.PD, port uint16) (*verbs.Listener, uint16, error) {
	if port != 0 {
		ln, err := dev.Listen(pd, port, 1)
		return ln, port, err
	}
	var ln *verbs.Listener
	var err error
	for port = DefaultPort; port < DefaultPort+1000; port++ {
		if ln, err = dev.Listen(pd, port, 1); !errors.Is(err, verbs.ErrBusy) {
			break
		}
	}
	return ln, port, err
}

// server is Serve's state once the client's hello has arrived.
type server struct {
	s    *side
	spec Spec
	res  *Result
	// peerAddr and peerKey name the client's landing region (write_lat's
	// echoes).
	peerAddr uint64
	peerKey  uint32
	// n counts messages arrived, bad those that did not check out; fin is
	// the client's count once its fin has come (-1 before).
	n, bad uint64
	fin    int64
}

// acceptHello waits for the client's hello and reads the test it asks for.
func acceptHello(ctx context.Context, s *side) (*server, error) {
	wc, err := s.next(ctx)
	if err != nil {
		return nil, err
	}
	h := s.ctl.Bytes()[helloOff:]
	le := binary.LittleEndian
	if wc.Op != verbs.OpRecv || le.Uint32(h) != magic || int(h[4]) >= len(tests) {
		return nil, fmt.Errorf("%w: no hello", ErrProtocol)
	}
	spec := Spec{Test: tests[h[4]], Verify: h[5] == 1, Depth: int(le.Uint32(h[8:])), Size: int(le.Uint64(h[16:])), Count: 1}
	if err := spec.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	v := &server{s: s, spec: spec, peerAddr: le.Uint64(h[24:]), peerKey: le.Uint32(h[32:]), fin: -1}
	if s.key = le.Uint64(h[40:]); s.key == 0 {
		s.key = seed // a client that sends no key
	}
	v.res = &Result{Spec: spec, Status: "ok"}
	return v, nil
}

// slot returns the bytes of message i's slot in the server's region.
func (v *server) slot(i uint64) []byte {
	k, size := int(i%uint64(v.spec.Depth)), v.spec.Size
	return v.s.buf.Bytes()[k*size : (k+1)*size]
}

// arrives reports whether the test's messages arrive at the server (it
// counts them to the client's fin); credits whether the client waits for
// each to be checked before it reuses the slot.
func (v *server) arrives() bool {
	t := v.spec.Test
	return t == SendBW || t == WriteLat || t == WriteBW && v.spec.Verify
}

func (v *server) credits() bool {
	t := v.spec.Test
	return t == SendBW || t == WriteBW && v.spec.Verify
}

// ready allocates the region the client's messages land in (or read_bw
// reads, filled with the pattern), posts a receive per slot and sends the
// client the region's address and key.
func (v *server) ready() error {
	s, spec := v.s, &v.spec
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	var err error
	if s.buf, err = s.pd.AllocMR(spec.Depth*spec.Size, access); err != nil {
		return err
	}
	s.size = spec.Size
	// One receive per slot: WRITE_IMM notifications, SENDs' data. The
	// client's fin (a 0-byte SEND_IMM) takes whichever is next: it comes
	// only once every message has been credited, so one is posted.
	for i := 0; i < spec.Depth; i++ {
		if err := s.postSlotRecv(spec, uint64(i)); err != nil {
			return err
		}
	}
	if spec.Test == ReadBW {
		for i := 0; i < spec.Depth; i++ {
			s.fill(v.slot(uint64(i)), uint64(i))
		}
	}
	ready := s.ctl.Bytes()[replyOff:]
	binary.LittleEndian.PutUint64(ready, s.buf.Addr())
	binary.LittleEndian.PutUint32(ready[8:], s.buf.RKey())
	return s.qp.PostSend(verbs.SendWR{ID: 1 << 40, Op: verbs.OpSend, SGL: []verbs.SGE{s.ctl.SGE(replyOff, 16)}})
}

// receive takes completions until the fin and, for the tests whose
// messages arrive here, until every one of them has.
func (v *server) receive(ctx context.Context) error {
	arrive := v.arrives()
	for v.fin < 0 || arrive && int64(v.n) < v.fin {
		wc, err := v.s.next(ctx)
		if err != nil {
			return fmt.Errorf("after %d messages: %w", v.n, err)
		}
		if wc.Op != verbs.OpRecv && wc.Op != verbs.OpRecvImm {
			continue // our own sends
		}
		if wc.Op == verbs.OpRecvImm && wc.Bytes == 0 {
			v.fin = int64(wc.Imm) // the client's count
			continue
		}
		if err := v.message(wc); err != nil {
			return err
		}
	}
	v.res.Messages = int64(v.n)
	if !arrive {
		v.res.Messages = v.fin
	}
	v.res.Bytes = v.res.Messages * int64(v.spec.Size)
	return nil
}

// message handles one arrived message: reposts its slot's receive,
// checks it, echoes it (write_lat) and credits it when the client waits
// for credits.
func (v *server) message(wc verbs.WC) error {
	s, spec, res := v.s, &v.spec, v.res
	i := v.n
	v.n++
	ok := true
	k := wc.ID // the slot the receive was posted for
	data := v.slot(k)
	// Repost first: write_lat's echo makes the client send its next
	// message at once, and a credit lets it reuse a slot; either must
	// find a receive posted. The slot's bytes are not overwritten
	// before its credit (or echo) goes out.
	if err := s.postSlotRecv(spec, k); err != nil {
		return err
	}
	switch spec.Test {
	case WriteBW:
		ok = wc.Op == verbs.OpRecvImm && uint64(wc.Imm) == i && int(wc.Bytes) == spec.Size && (!spec.Verify || s.check(res, data, i))
	case SendBW:
		ok = wc.Op == verbs.OpRecv && int(wc.Bytes) == spec.Size && (!spec.Verify || s.check(res, data, i))
	case WriteLat:
		ok = wc.Op == verbs.OpRecvImm && uint64(wc.Imm) == i && (!spec.Verify || s.check(res, data, i))
		// The echo goes back from our own memory: the bytes that landed.
		if err := s.qp.PostSend(verbs.SendWR{ID: i, Op: verbs.OpWriteImm, Imm: uint32(i), SGL: []verbs.SGE{s.buf.SGE(0, spec.Size)},
			RemoteAddr: v.peerAddr, RKey: v.peerKey}); err != nil {
			return err
		}
	}
	if spec.Verify {
		res.Checked++
	}
	if !ok {
		v.bad++
		res.Errors++
	}
	if !v.credits() {
		return nil
	}
	credit := uint32(i) &^ badBit
	if !ok {
		credit |= badBit
	}
	return s.sendImm(credit)
}

// finish answers the client's fin with what the server checked and waits
// for the answer to go out before the connection closes.
func (v *server) finish(ctx context.Context) (*Result, error) {
	s, res := v.s, v.res
	res.Verified = v.spec.Verify && v.bad == 0 && res.Checked == res.Messages
	reply := s.ctl.Bytes()[replyOff:]
	binary.LittleEndian.PutUint64(reply, uint64(res.Checked))
	binary.LittleEndian.PutUint64(reply[8:], v.bad)
	if err := s.qp.PostSend(verbs.SendWR{ID: 1 << 41, Op: verbs.OpSend, SGL: []verbs.SGE{s.ctl.SGE(replyOff, 16)}}); err != nil {
		return res, err
	}
	for {
		wc, err := s.next(ctx)
		if err != nil || wc.ID == 1<<41 {
			break
		}
	}
	if v.bad > 0 {
		res.Status = fmt.Sprintf("%d of %d messages did not check out", v.bad, res.Checked)
	}
	return res, nil
}
