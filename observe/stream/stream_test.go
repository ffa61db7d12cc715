package stream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"
)

func TestPipeDropsWholeWrites(t *testing.T) {
	p := New(10)
	for _, w := range []string{"abcd", "efgh", "ijkl", "mn"} {
		if n, err := p.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if p.Room(1) {
		t.Error("Room(1) with 10 of 10 bytes held")
	}
	got, lost, closed := p.take(nil)
	if string(got) != "abcdefghmn" || lost != 1 || closed {
		t.Errorf("take = %q, lost %d, closed %v; want abcdefghmn, 1, false", got, lost, closed)
	}
	if !p.Room(10) || p.Room(11) {
		t.Error("Room after take: want exactly 10 bytes free")
	}
	p.Close()
	if _, err := p.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
	if _, _, closed := p.take(nil); !closed {
		t.Error("take after Close: not closed")
	}
}

// TestServe: what the writer sends before closing reaches the client in
// order, with a note where writes were lost.
func TestServe(t *testing.T) {
	p := New(8)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Serve(rec, httptest.NewRequest("GET", "/x", nil), "text/plain", func(dst []byte, lost uint64) []byte {
			return fmt.Appendf(dst, "[%d lost]", lost)
		})
	}()
	p.Write([]byte("12345"))
	p.Write([]byte("6789")) // may not fit, depending on whether Serve took the first
	p.Close()
	<-done
	if ct := rec.Header().Get("Content-Type"); ct != "text/plain" || rec.Code != 200 {
		t.Errorf("status %d, content type %q", rec.Code, ct)
	}
	if body := rec.Body.String(); body != "123456789" && body != "12345[1 lost]" {
		t.Errorf("body %q", body)
	}
}

// TestServeClientGone: Serve returns when the client's context ends even
// though the pipe stays open.
func TestServeClientGone(t *testing.T) {
	p := New(8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil).WithContext(ctx), "text/plain", nil)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running after the client went away")
	}
}
