// Package stream carries bytes from a lab's event-loop goroutine to one
// HTTP reader: live captures and live protocol traces both stream this
// way. The loop writes into a Pipe and never blocks; the reader's
// goroutine (Serve) sends what has arrived and waits for more.
package stream

import (
	"net"
	"net/http"
	"sync"
)

// Pipe is a bounded buffer between one writer that must never block (the
// lab's loop) and one reader (an HTTP handler). A write that does not fit
// is dropped whole and counted; a writer that must not lose part of a
// stream (a pcapng file) checks Room first. The zero Pipe is not usable;
// call New.
type Pipe struct {
	mu     sync.Mutex // guards the fields below
	buf    []byte
	limit  int
	lost   uint64
	closed bool
	notify chan struct{} // a token when there is something to take
}

// New returns a pipe that holds at most limit bytes for its reader.
func New(limit int) *Pipe {
	return &Pipe{limit: limit, notify: make(chan struct{}, 1)}
}

// Room reports whether n more bytes fit.
func (p *Pipe) Room(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.buf)+n <= p.limit
}

// Write appends b, or drops it whole (and counts it) when it does not fit.
// It never blocks; once the pipe is closed it returns net.ErrClosed.
func (p *Pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return 0, net.ErrClosed
	case len(p.buf)+len(b) > p.limit:
		p.lost++
	default:
		p.buf = append(p.buf, b...)
	}
	p.mu.Unlock()
	p.wake()
	return len(b), nil
}

// Close ends the stream after what is buffered.
func (p *Pipe) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wake()
	return nil
}

func (p *Pipe) wake() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// take appends the buffered bytes to dst and empties the pipe; lost is the
// number of writes dropped since the last take.
func (p *Pipe) take(dst []byte) (_ []byte, lost uint64, closed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	dst = append(dst, p.buf...)
	p.buf = p.buf[:0]
	lost, p.lost = p.lost, 0
	return dst, lost, p.closed
}

// Serve answers r with 200 and what the pipe carries, flushing as it
// arrives, until the pipe is closed and drained or the client goes away.
// When writes were lost, noteLost (if not nil) may append a note about
// them to what is sent next.
func (p *Pipe) Serve(w http.ResponseWriter, r *http.Request, contentType string, noteLost func(dst []byte, lost uint64) []byte) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	var chunk []byte
	for {
		var lost uint64
		var closed bool
		chunk, lost, closed = p.take(chunk[:0])
		if lost > 0 && noteLost != nil {
			chunk = noteLost(chunk, lost)
		}
		if len(chunk) > 0 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if closed {
			return
		}
		select {
		case <-p.notify:
		case <-r.Context().Done():
			return
		}
	}
}
