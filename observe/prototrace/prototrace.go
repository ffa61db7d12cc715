// Package prototrace is mrlab's protocol trace: one readable line per
// decision a transport makes, stamped with lab time and who made it:
//
//	t=12.301us h3->h7 conn 4 path 9: SACK hole psn 1834, retransmit
//	t=15.02us h3->h7 conn 4 path 9: entropy 49213 -> 50877 after 3 losses
//
// A Log implements transport.Tracer once per host (Log.Host). Filters by
// host, connection, path and text select what is written; lines rejected
// by host or connection are never formatted. Transports only call a Tracer
// that is set, so a lab without a trace pays nothing.
package prototrace

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// Log writes protocol trace lines to a writer. It is not safe for
// concurrent use: every host's tracer runs on the lab's event loop.
type Log struct {
	w      *bufio.Writer
	filter Filter
	buf    []byte // the line being built
	msg    []byte // the transport's formatted message
	lines  uint64
	err    error
}

// New returns a Log writing the lines f selects to w. Call Flush at the end
// of a run (and periodically in live labs).
func New(w io.Writer, f Filter) *Log {
	return &Log{w: bufio.NewWriterSize(w, 32<<10), filter: f, buf: make([]byte, 0, 256)}
}

// Lines returns how many lines have been written.
func (l *Log) Lines() uint64 { return l.lines }

// Flush writes buffered lines out.
func (l *Log) Flush() error {
	if l.err != nil {
		return l.err
	}
	if err := l.w.Flush(); err != nil {
		l.err = fmt.Errorf("writing protocol trace: %w", err)
	}
	return l.err
}

// Err returns the first write error.
func (l *Log) Err() error { return l.err }

// PeerFunc names the host at the other end of a local connection, or ""
// when unknown.
type PeerFunc func(conn uint32) string

// Host returns the Tracer for one host's NIC: set it as transport.Config's
// Trace for every connection the host opens. peer, if non-nil, names the
// far end so lines read "h3->h7".
func (l *Log) Host(name string, peer PeerFunc) transport.Tracer {
	ht := &hostTracer{log: l, host: name, peer: peer}
	ht.hostOK = l.filter.hostsOnly(name)
	return ht
}

// hostTracer is one host's view of the Log; it implements transport.Tracer.
type hostTracer struct {
	log  *Log
	host string
	peer PeerFunc
	// hostOK caches the host filter's verdict on this host alone: true
	// means every line passes the host filter; false means the peer must
	// be checked.
	hostOK bool
}

var _ transport.Tracer = (*hostTracer)(nil)

// Tracef implements transport.Tracer. format and args describe the
// decision; by convention a per-path decision starts "path N: ".
func (t *hostTracer) Tracef(now sim.Time, conn uint32, format string, args ...any) {
	l := t.log
	f := &l.filter
	if !f.conn(conn) {
		return
	}
	peer := ""
	if t.peer != nil {
		peer = t.peer(conn)
	}
	if !t.hostOK && !f.host(peer) {
		return
	}
	msg := fmt.Appendf(l.msg[:0], format, args...)
	l.msg = msg
	_, hasPath := pathPrefix(msg)
	if !f.path(msg) {
		return
	}
	b := append(l.buf[:0], "t="...)
	b = appendTime(b, now)
	b = append(b, ' ')
	b = append(b, t.host...)
	if peer != "" {
		b = append(b, "->"...)
		b = append(b, peer...)
	}
	b = append(b, " conn "...)
	b = strconv.AppendUint(b, uint64(conn), 10)
	// "conn 4 path 9: ..." reads better than "conn 4: path 9: ...".
	if hasPath {
		b = append(b, ' ')
	} else {
		b = append(b, ": "...)
	}
	b = append(b, msg...)
	l.emit(b)
}

// emit writes line b (built in l.buf's storage, without its newline) if
// it passes the text filters, and keeps the storage for the next line.
func (l *Log) emit(b []byte) {
	l.buf = b
	if !l.filter.text(b) {
		return
	}
	b = append(b, '\n')
	l.buf = b
	l.write(b)
}

func (l *Log) write(b []byte) {
	if l.err != nil {
		return
	}
	if _, err := l.w.Write(b); err != nil {
		l.err = fmt.Errorf("writing protocol trace: %w", err)
		return
	}
	l.lines++
}

// Note writes a line that no connection made, e.g. a fabric event or a
// fault script step: "t=1.2ms fault: link p0-leaf0-spine1 down". Host and
// connection filters do not apply; the text filter does.
func (l *Log) Note(now sim.Time, who, format string, args ...any) {
	b := l.buf[:0]
	b = append(b, "t="...)
	b = appendTime(b, now)
	b = append(b, ' ')
	b = append(b, who...)
	b = append(b, ": "...)
	b = fmt.Appendf(b, format, args...)
	l.emit(b)
}

// pathPrefix reads "path N" at the start of a message.
func pathPrefix(msg []byte) (int, bool) {
	const p = "path "
	if len(msg) <= len(p) || string(msg[:len(p)]) != p {
		return 0, false
	}
	n, i := 0, len(p)
	for ; i < len(msg) && msg[i] >= '0' && msg[i] <= '9' && i < len(p)+9; i++ {
		n = n*10 + int(msg[i]-'0')
	}
	if i == len(p) {
		return 0, false
	}
	return n, true
}

// appendTime appends t as sim.Time.String spells it ("12.301us") without
// allocating a string.
func appendTime(b []byte, t sim.Time) []byte {
	if t < 0 || t == sim.Never {
		return append(b, t.String()...)
	}
	var unit sim.Time
	var suffix string
	switch {
	case t < sim.Microsecond:
		return append(strconv.AppendInt(b, int64(t), 10), "ns"...)
	case t < sim.Millisecond:
		unit, suffix = sim.Microsecond, "us"
	case t < sim.Second:
		unit, suffix = sim.Millisecond, "ms"
	default:
		unit, suffix = sim.Second, "s"
	}
	b = strconv.AppendFloat(b, float64(t)/float64(unit), 'f', -1, 64)
	return append(b, suffix...)
}
