package prototrace

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/filter"
)

func peers(m map[uint32]string) PeerFunc { return func(c uint32) string { return m[c] } }

// play sends the same decisions through a Log with filter f.
func play(t *testing.T, f Filter) []string {
	t.Helper()
	var buf bytes.Buffer
	l := New(&buf, f)
	h3 := l.Host("h3", peers(map[uint32]string{4: "h7", 5: "h1"}))
	h7 := l.Host("h7", peers(map[uint32]string{2: "h3"}))
	h3.Tracef(12301, 4, "path %d: SACK hole psn %d, retransmit", 9, 1834)
	h3.Tracef(15020, 4, "path %d: entropy %d -> %d after %d losses", 9, 49213, 50877, 3)
	h3.Tracef(16*sim.Microsecond, 5, "path %d: RTO %v, cwnd 1 MSS", 2, 400*sim.Microsecond)
	h7.Tracef(2*sim.Millisecond, 2, "rate hint %d Mb/s to %d senders", 25000, 4)
	h3.Tracef(999, 6, "connection established")
	l.Note(3*sim.Millisecond, "fault", "link %s down", "p0-leaf0-spine1")
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(buf.String(), "\n")
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	if uint64(len(lines)) != l.Lines() {
		t.Errorf("Lines() = %d, wrote %d", l.Lines(), len(lines))
	}
	return lines
}

func TestTraceLines(t *testing.T) {
	all := []string{
		"t=12.301us h3->h7 conn 4 path 9: SACK hole psn 1834, retransmit",
		"t=15.02us h3->h7 conn 4 path 9: entropy 49213 -> 50877 after 3 losses",
		"t=16us h3->h1 conn 5 path 2: RTO 400us, cwnd 1 MSS",
		"t=2ms h7->h3 conn 2: rate hint 25000 Mb/s to 4 senders",
		"t=999ns h3 conn 6: connection established",
		"t=3ms fault: link p0-leaf0-spine1 down",
	}
	cases := []struct {
		filter string
		want   []string
	}{
		{"", all},
		{"host=h7", []string{all[0], all[1], all[3], all[5]}},
		{"host=h1,host=h7", []string{all[0], all[1], all[2], all[3], all[5]}},
		{"host=h3,conn=4", []string{all[0], all[1], all[5]}},
		{"path=9", []string{all[0], all[1], all[5]}},
		{"path=2,path=9,grep=RTO", []string{all[2]}},
		{"re=entropy \\d+ -> \\d+", []string{all[1]}},
		{"conn=4,re=(SACK|down)", []string{all[0], all[5]}},
		{"grep=link", []string{all[5]}},
		{"conn=77", []string{all[5]}},
	}
	for _, tc := range cases {
		t.Run(tc.filter, func(t *testing.T) {
			f, err := ParseFilter(tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, play(t, f)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestParseFilter(t *testing.T) {
	f, err := ParseFilter("host=h3, conn=4,path=9,re=a,b")
	if err != nil {
		t.Fatal(err)
	}
	want := Filter{Hosts: []string{"h3"}, Conns: []uint32{4}, Paths: []int{9}, Match: regexp.MustCompile("a,b")}
	if d := cmp.Diff(want, f, cmp.Comparer(func(a, b *regexp.Regexp) bool { return a.String() == b.String() })); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for _, bad := range []string{"host", "conn=x", "path=-1", "colour=red", "re=(", "host="} {
		if _, err := ParseFilter(bad); !errors.Is(err, filter.ErrBadFilter) {
			t.Errorf("ParseFilter(%q) = %v, want ErrBadFilter", bad, err)
		}
	}
}

// TestFilteredOutDoesNotFormat: a line rejected by host or connection
// costs no formatting (its arguments' String methods never run).
func TestFilteredOutDoesNotFormat(t *testing.T) {
	l := New(io.Discard, Filter{Conns: []uint32{1}})
	tr := l.Host("h0", nil)
	var s spy
	tr.Tracef(0, 2, "path 1: %v", &s)
	if s.calls != 0 {
		t.Errorf("filtered line was formatted %d times", s.calls)
	}
	tr.Tracef(0, 1, "path 1: %v", &s)
	if s.calls != 1 {
		t.Errorf("kept line formatted %d times", s.calls)
	}
}

type spy struct{ calls int }

func (s *spy) String() string { s.calls++; return "x" }

func TestTracefNoAllocs(t *testing.T) {
	l := New(io.Discard, Filter{})
	tr := l.Host("h3", peers(map[uint32]string{4: "h7"}))
	args := []any{9, 1834} // boxed once, as a caller holding them would
	allocs := testing.AllocsPerRun(1000, func() {
		tr.Tracef(12301, 4, "path %d: SACK hole psn %d, retransmit", args...)
	})
	if allocs != 0 {
		t.Errorf("Tracef allocates %v times per line", allocs)
	}
}

func TestAppendTime(t *testing.T) {
	for _, tm := range []sim.Time{0, 327, 12301, 4500000, 1250000000, sim.Never, -5} {
		if got := string(appendTime(nil, tm)); got != tm.String() {
			t.Errorf("appendTime(%d) = %q, want %q", tm, got, tm.String())
		}
	}
}

func TestWriteError(t *testing.T) {
	l := New(failWriter{}, Filter{})
	tr := l.Host("h0", nil)
	for i := 0; i < 2000; i++ {
		tr.Tracef(0, 1, "path 1: padding padding padding padding padding padding")
	}
	if l.Flush() == nil || l.Err() == nil {
		t.Error("write error not reported")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// BenchmarkTracef: a kept line, and a line the connection filter rejects
// (which must cost next to nothing).
func BenchmarkTracef(b *testing.B) {
	args := []any{9, 1834}
	b.Run("kept", func(b *testing.B) {
		tr := New(io.Discard, Filter{}).Host("h3", peers(map[uint32]string{4: "h7"}))
		b.ReportAllocs()
		for b.Loop() {
			tr.Tracef(12301, 4, "path %d: SACK hole psn %d, retransmit", args...)
		}
	})
	b.Run("filtered", func(b *testing.B) {
		tr := New(io.Discard, Filter{Conns: []uint32{5}}).Host("h3", peers(map[uint32]string{4: "h7"}))
		b.ReportAllocs()
		for b.Loop() {
			tr.Tracef(12301, 4, "path %d: SACK hole psn %d, retransmit", args...)
		}
	})
}

func TestParseFabricEvents(t *testing.T) {
	cases := []struct {
		in   string
		want FabricEvents
	}{
		{"", 0},
		{"none", 0},
		{"drops", TraceDrops},
		{"drops, marks,corrupt", TraceDrops | TraceMarks | TraceCorrupt},
		{"marks,,none", TraceMarks},
	}
	for _, tc := range cases {
		if got, err := ParseFabricEvents(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseFabricEvents(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if _, err := ParseFabricEvents("drops,everything"); !errors.Is(err, ErrBadFabricEvents) {
		t.Errorf("unknown event: %v, want ErrBadFabricEvents", err)
	}
}
