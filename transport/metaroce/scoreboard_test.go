package metaroce

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sbStep is one action on a scoreboard in a table test. Fields apply in
// the order they are listed.
type sbStep struct {
	push    []uint16 // payload sizes of new PSNs (DSN = PSN)
	ack     []uint32 // PSNs acknowledged
	lose    []uint32 // PSNs declared lost by hand (an RNR NAK)
	strip   []uint32 // PSNs made payload-free
	move    []uint32 // PSNs whose chunk went again elsewhere
	resend  []uint32 // lost PSNs sent again
	presume bool     // take everything outstanding out of flight
	detect  bool     // run loss detection
	advance bool
	restart bool
}

// sbView is what a table test checks.
type sbView struct {
	Una, Nxt       uint32
	InFlight, Lost int
	Detected       []uint32 // PSNs loss detection declared, in order
	NewlyAcked     []uint32
	Left           int // bytes the acks took out of flight
	Room           bool
}

func TestScoreboard(t *testing.T) {
	const big = 1000
	for _, tc := range []struct {
		name  string
		start uint32 // una = nxt at the start
		steps []sbStep
		want  sbView
	}{{
		name:  "in-order ACKs settle everything",
		steps: []sbStep{{push: []uint16{big, big, big}}, {ack: []uint32{0, 1, 2}, advance: true}},
		want:  sbView{Una: 3, Nxt: 3, NewlyAcked: []uint32{0, 1, 2}, Left: 3 * big, Room: true},
	}, {
		name:  "a hole below a later arrival is loss",
		steps: []sbStep{{push: []uint16{big, big, big, big}}, {ack: []uint32{1, 2}, detect: true, advance: true}},
		want:  sbView{Una: 0, Nxt: 4, InFlight: big, Lost: 1, Detected: []uint32{0}, NewlyAcked: []uint32{1, 2}, Left: 2 * big, Room: true},
	}, {
		name:  "PSNs sent after the newest arrival are not lost",
		steps: []sbStep{{push: []uint16{big, big, big}}, {ack: []uint32{0}, detect: true, advance: true}},
		want:  sbView{Una: 1, Nxt: 3, InFlight: 2 * big, NewlyAcked: []uint32{0}, Left: big, Room: true},
	}, {
		name: "a PSN declared lost that arrives after all leaves the lost count",
		steps: []sbStep{{push: []uint16{big, big, big}}, {ack: []uint32{1}, detect: true},
			{ack: []uint32{0}, advance: true}},
		want: sbView{Una: 2, Nxt: 3, InFlight: big, Detected: []uint32{0}, NewlyAcked: []uint32{1, 0}, Left: big, Room: true},
	}, {
		name:  "duplicate ACKs acknowledge once",
		steps: []sbStep{{push: []uint16{big, big}}, {ack: []uint32{0, 0, 1, 1}, advance: true}},
		want:  sbView{Una: 2, Nxt: 2, NewlyAcked: []uint32{0, 1}, Left: 2 * big, Room: true},
	}, {
		// Karn: PSN 0 is lost, resent, and then acknowledged; the ACK
		// does not say which copy arrived, so PSN 1 (sent before the
		// copy) is not declared lost on its strength.
		name: "an ACK of a resent PSN does not move the loss clock",
		steps: []sbStep{{push: []uint16{big, big, big}}, {ack: []uint32{2}, detect: true},
			{resend: []uint32{0, 1}}, {ack: []uint32{0}, detect: true, advance: true}},
		want: sbView{Una: 1, Nxt: 3, InFlight: big, Detected: []uint32{0, 1}, NewlyAcked: []uint32{2, 0}, Left: 2 * big, Room: true},
	}, {
		name: "a resent PSN is lost again only behind a later first transmission",
		steps: []sbStep{{push: []uint16{big, big}}, {ack: []uint32{1}, detect: true}, {resend: []uint32{0}},
			{push: []uint16{big}}, {ack: []uint32{2}, detect: true, advance: true}},
		want: sbView{Una: 0, Nxt: 3, Lost: 1, Detected: []uint32{0, 0}, NewlyAcked: []uint32{1, 2}, Left: 2 * big, Room: true},
	}, {
		name:  "a refused PSN declared lost by hand waits to be resent",
		steps: []sbStep{{push: []uint16{big, big}}, {lose: []uint32{0}, strip: []uint32{0}}, {resend: []uint32{0}}},
		want:  sbView{Una: 0, Nxt: 2, InFlight: big, Room: true},
	}, {
		name:  "a stripped PSN carries nothing in flight",
		steps: []sbStep{{push: []uint16{big, big}}, {strip: []uint32{0}}, {ack: []uint32{0}, advance: true}},
		want:  sbView{Una: 1, Nxt: 2, InFlight: big, NewlyAcked: []uint32{0}, Room: true},
	}, {
		// A tail-loss probe takes the path's outstanding bytes out of
		// flight; they leave no second time when acked or declared lost,
		// and come back only when resent.
		name: "presumed entries hold no place in flight",
		steps: []sbStep{{push: []uint16{big, big, big}}, {presume: true}, {push: []uint16{big}},
			{ack: []uint32{0, 3}, detect: true, advance: true}, {resend: []uint32{1, 2}}},
		want: sbView{Una: 1, Nxt: 4, InFlight: 2 * big, Detected: []uint32{1, 2}, NewlyAcked: []uint32{0, 3}, Left: big, Room: true},
	}, {
		name:  "a moved chunk leaves a filler, out of flight, that can still be lost",
		steps: []sbStep{{push: []uint16{big, big, big}}, {move: []uint32{0}}, {ack: []uint32{2}, detect: true}},
		want:  sbView{Una: 0, Nxt: 3, Lost: 2, Detected: []uint32{0, 1}, NewlyAcked: []uint32{2}, Left: big, Room: true},
	}, {
		name:  "PSNs wrap around 2^32",
		start: 1<<32 - 2,
		steps: []sbStep{{push: []uint16{big, big, big, big}}, {ack: []uint32{1<<32 - 1, 0}, detect: true, advance: true}},
		want:  sbView{Una: 1<<32 - 2, Nxt: 2, InFlight: big, Lost: 1, Detected: []uint32{1<<32 - 2}, NewlyAcked: []uint32{1<<32 - 1, 0}, Left: 2 * big, Room: true},
	}, {
		name:  "restart forgets the old generation and its transmissions",
		steps: []sbStep{{push: []uint16{big, big}}, {ack: []uint32{1}}, {restart: true}, {push: []uint16{big, big}}, {ack: []uint32{1}, detect: true}},
		want:  sbView{Una: 0, Nxt: 2, Lost: 1, Detected: []uint32{0}, NewlyAcked: []uint32{1, 1}, Left: 2 * big, Room: true},
	}, {
		name:  "the SACK window bounds what is outstanding",
		steps: []sbStep{{push: make([]uint16, maxPathWindow)}},
		want:  sbView{Una: 0, Nxt: maxPathWindow, Room: false},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scoreboard{una: tc.start, nxt: tc.start}
			var got sbView
			for _, st := range tc.steps {
				for _, n := range st.push {
					psn := s.push(sbEntry{dsn: s.nxt, size: n})
					if e := s.entry(psn); e.dsn != psn {
						t.Fatalf("push: PSN %d holds DSN %d", psn, e.dsn)
					}
				}
				for _, psn := range st.ack {
					if !s.outstanding(psn) {
						continue
					}
					if _, newly, left := s.ack(psn); newly {
						got.NewlyAcked = append(got.NewlyAcked, psn)
						got.Left += left
					}
				}
				for _, psn := range st.lose {
					s.markLost(psn)
				}
				for _, psn := range st.strip {
					s.strip(psn, sbProbe)
				}
				for _, psn := range st.move {
					s.move(psn)
					if e := s.entry(psn); !e.moved || e.kind != sbProbe || e.dsn != psn {
						t.Fatalf("moved PSN %d: entry %+v, want a filler that remembers its chunk", psn, *e)
					}
				}
				if st.presume {
					s.presume()
				}
				for _, psn := range st.resend {
					if next, ok := s.nextLost(); !ok || next != psn {
						t.Fatalf("nextLost = %d %v, want %d", next, ok, psn)
					}
					s.resend(psn, 0, 0)
				}
				if st.detect {
					s.detectLoss(func(psn uint32) { got.Detected = append(got.Detected, psn) })
				}
				if st.advance {
					s.advance()
				}
				if st.restart {
					s.restart()
				}
			}
			got.Una, got.Nxt, got.InFlight, got.Lost, got.Room = s.una, s.nxt, s.inflight, s.lost, s.room()
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestScoreboardGrowth: the ring grows as far as what is outstanding and
// keeps every entry where its PSN says.
func TestScoreboardGrowth(t *testing.T) {
	var s scoreboard
	for i := 0; i < 3000; i++ {
		s.push(sbEntry{dsn: uint32(i), size: 1})
		if i%3 == 0 { // settle the oldest outstanding PSN now and then
			s.ack(s.una)
			s.advance()
		}
	}
	if n := int(s.nxt - s.una); len(s.ring) < n || len(s.ring) > 2*max(n, 4) {
		t.Errorf("ring of %d entries for %d outstanding", len(s.ring), n)
	}
	for psn := s.una; psn != s.nxt; psn++ {
		if e := s.entry(psn); e.dsn != psn || e.acked {
			t.Fatalf("PSN %d: entry %+v", psn, *e)
		}
	}
	if s.inflight != int(s.nxt-s.una) {
		t.Errorf("in flight %d, want %d", s.inflight, s.nxt-s.una)
	}
}
