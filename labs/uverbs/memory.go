package uverbs

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// pd is a client's protection domain.
type pd struct {
	h    uint32
	pd   *softnic.PD
	refs int // regions, QPs and listeners in it
}

// mr is a registered region: the client's memfd, mapped into the lab.
type mr struct {
	pd  *pd
	mr  *softnic.MR
	mem []byte
	key uint32
	n   uint64
}

func (c *client) allocPD(now sim.Time, r *verbsabi.Request) {
	if uint32(len(c.pds)) >= c.ep.cfg.Limits.MaxPDs {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "protection domain limit: %d per process", c.ep.cfg.Limits.MaxPDs)
		return
	}
	p := &pd{h: c.handleID(), pd: c.ep.cfg.NIC.AllocPD()}
	c.pds[p.h] = p
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq, Handle: p.h})
}

func (c *client) deallocPD(now sim.Time, r *verbsabi.Request) {
	p := c.pds[r.PD]
	switch {
	case p == nil:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no protection domain %d", r.PD)
	case p.refs > 0:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeBusy, "protection domain %d still holds %d regions, QPs or listeners", r.PD, p.refs)
	default:
		delete(c.pds, r.PD)
		c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq})
	}
}

// regMR maps the client's memfd and registers it with the NIC, so the
// NIC reads and places payload in the client's own memory.
func (c *client) regMR(now sim.Time, r *verbsabi.Request, fd int) {
	lim := &c.ep.cfg.Limits
	p := c.pds[r.PD]
	switch {
	case p == nil:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no protection domain %d", r.PD)
		return
	case r.Access&^(verbsabi.AccessLocalWrite|verbsabi.AccessRemoteWrite|verbsabi.AccessRemoteRead) != 0:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "unknown access flags %#x", r.Access)
		return
	case r.Access&verbsabi.AccessRemoteWrite != 0 && r.Access&verbsabi.AccessLocalWrite == 0:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "remote write access needs local write access too (as in ibv_reg_mr)")
		return
	case r.Length == 0 || r.Length > 1<<40:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "region length %d", r.Length)
		return
	case r.Op == verbsabi.OpRegMRAt && r.IOVA > ^uint64(0)-r.Length:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "region at %#x of %d bytes wraps the address space", r.IOVA, r.Length)
		return
	case r.Op == verbsabi.OpRegMR && r.Offset%verbsabi.PageSize != 0:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "region offset %d in the memfd is not page-aligned", r.Offset)
		return
	case uint32(len(c.mrs)) >= lim.MaxMRs:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "memory region limit: %d per process", lim.MaxMRs)
		return
	case r.Length > lim.MaxMRBytes-c.mrBytes:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "registered memory limit: %d bytes per process (%d registered, %d asked)",
			lim.MaxMRBytes, c.mrBytes, r.Length)
		return
	}
	if err := verbsabi.CheckMemfd(fd, r.Offset, r.Length); err != nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeBadMemory, "registering %d bytes: %v", r.Length, err)
		return
	}
	// REG_MR_AT may start a region anywhere in a page: map from the
	// page's start, register the bytes asked for.
	skip := r.Offset % verbsabi.PageSize
	mem, err := verbsabi.Map(fd, r.Offset-skip, int(skip+r.Length))
	if err != nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeBadMemory, "registering %d bytes: %v", r.Length, err)
		return
	}
	var acc transport.Access
	if r.Access&verbsabi.AccessLocalWrite != 0 {
		acc |= transport.AccessLocalWrite
	}
	if r.Access&verbsabi.AccessRemoteWrite != 0 {
		acc |= transport.AccessRemoteWrite
	}
	if r.Access&verbsabi.AccessRemoteRead != 0 {
		acc |= transport.AccessRemoteRead
	}
	var m *softnic.MR
	if r.Op == verbsabi.OpRegMRAt {
		m, err = p.pd.RegisterAt(mem[skip:], acc, r.IOVA)
	} else {
		m, err = p.pd.Register(mem, acc)
	}
	if err != nil {
		verbsabi.Unmap(mem)
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "registering %d bytes: %v", r.Length, err)
		return
	}
	x := &mr{pd: p, mr: m, mem: mem, key: m.LKey(), n: r.Length}
	p.refs++
	c.mrs[m.LKey()] = x
	c.mrBytes += r.Length
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq, LKey: m.LKey(), RKey: m.RKey(), MRAddr: m.Addr()})
}

func (c *client) deregMR(now sim.Time, r *verbsabi.Request) {
	m := c.mrs[r.Key]
	if m == nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no memory region with lkey %#x", r.Key)
		return
	}
	c.dropMR(m)
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq})
}

// dropMR deregisters and unmaps a region. From Deregister on the NIC never
// touches the memory (softnic's contract), so unmapping right after is
// safe even with transfers in flight: they fail with access errors.
func (c *client) dropMR(m *mr) {
	_ = m.mr.Deregister()
	verbsabi.Unmap(m.mem)
	m.mem = nil
	m.pd.refs--
	c.mrBytes -= m.n
	delete(c.mrs, m.key)
}
