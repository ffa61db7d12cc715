package metaroce

import (
	"math/rand/v2"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestPathSetOrder checks next and after against a scan of every number
// on random sets, empty and full ones included.
func TestPathSetOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		var s pathSet
		var in [256]bool
		density := r.IntN(5) // 0: empty; 4: about full
		for i := range in {
			if density > 0 && r.IntN(4) < density {
				in[i] = true
				s.add(i)
			}
		}
		if trial == 1 {
			s, in = pathSet{}, [256]bool{}
		}
		count := 0
		for _, b := range in {
			if b {
				count++
			}
		}
		if s.len() != count {
			t.Fatalf("trial %d: len %d, want %d", trial, s.len(), count)
		}
		for k := -1; k < 256; k++ {
			want := -1
			for i := k + 1; i < 256; i++ {
				if in[i] {
					want = i
					break
				}
			}
			if got := s.next(k); got != want {
				t.Fatalf("trial %d: next(%d) = %d, want %d", trial, k, got, want)
			}
			if want < 0 {
				want = s.next(-1)
			}
			if got := s.after(k); got != want {
				t.Fatalf("trial %d: after(%d) = %d, want %d", trial, k, got, want)
			}
		}
		for i := range in {
			if in[i] && r.IntN(2) == 0 {
				s.remove(i)
				in[i] = false
				if s.next(i-1) == i {
					t.Fatalf("trial %d: %d still in after remove", trial, i)
				}
			}
		}
	}
}

// After a 64 KiB WRITE at 128 paths the sets the per-packet and per-ACK
// loops visit hold what pathSel says and are small: the rack set is the
// used paths (every unused one swept to rackAt Never), a plane's
// candidates the paths that are not spare. If they held every path, path
// choice and loss detection would be back to scanning all 128.
func TestPathSelAfterWrite(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 1}, Options{Paths: 128})
	a := metaConn(l.ca)
	if err := l.ca.PostSend(write(7, 0, addrRW, addrRW+0x80000, 65536)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
		t.Fatalf("no completion; stats %+v", a.Stats())
	}
	var used, cand pathSet
	for i := range a.s.paths {
		p := &a.s.paths[i]
		if p.used() {
			used.add(i)
		} else if p.rackAt != sim.Never {
			t.Errorf("unused path %d: rackAt %v, want Never (swept)", i, p.rackAt)
		}
	}
	if a.s.sel.rack != used {
		t.Errorf("rack set %x, want the used paths %x", a.s.sel.rack, used)
	}
	var open pathSet
	for i := range a.s.paths {
		if !a.s.paths[i].spare {
			open.add(i)
		}
	}
	if a.s.sel.open != open {
		t.Errorf("open set %x, want the paths not spare %x", a.s.sel.open, open)
	}
	ports := a.cfg.Ports
	for port := 0; port < ports; port++ {
		cand = pathSet{}
		for i, j := port, 0; i < len(a.s.paths); i, j = i+ports, j+1 {
			if !a.s.paths[i].spare {
				cand.add(j)
			}
		}
		if got := a.s.sel.pick[port].cand; got != cand {
			t.Errorf("port %d: candidates %x, want the paths not spare %x", port, got, cand)
		}
	}
	if n := used.len(); n == 0 || n > 32 {
		t.Errorf("%d of 128 paths used by a 64 KiB WRITE, want 1-32", n)
	}
	if n := a.s.sel.pick[0].cand.len(); n == 0 || n > 32 {
		t.Errorf("%d candidates on plane 0, want 1-32", n)
	}
}
