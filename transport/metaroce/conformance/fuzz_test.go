package conformance

import (
	"strings"
	"testing"

	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// FuzzParse: any input parses or fails with an error naming the file and
// line; what parses, builds (injections) or decodes without panicking.
func FuzzParse(f *testing.F) {
	all, err := Builtin()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range all[:20] {
		src, _ := scripts.ReadFile("scripts/" + s.Name + ScriptExt)
		f.Add(string(src))
	}
	f.Add("section: 1\n0 < ACK rec=1/2/3/0-255 sack=0,255 extra=3 trunc=9\n")
	f.Add("section: 1\n+1e999us < WRITE len=@x+0x10\n")
	f.Add("section: 1\n0 < READ_REQ sinks=1:2:3,4:5:6 msg_len=3\n+0 > ACK pathack=1/*/3/- sack=!1\n")
	f.Fuzz(func(t *testing.T, src string) {
		s, err := Parse("f", src)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Fatalf("error without location: %v", err)
			}
			return
		}
		b := builder{vars: map[string]uint64{"x": 7}, nextPSN: map[uint16]uint32{}}
		r := &runner{b: b}
		for i := range s.Stmts {
			st := &s.Stmts[i]
			if st.Kind == Inject {
				pkt, _, err := r.b.build(st)
				if err == nil && len(pkt) > 1<<20 {
					t.Fatalf("built a %d-byte packet", len(pkt))
				}
				if err == nil {
					v := decode(&Sent{Bytes: pkt})
					r.match(v, st.Fields)
					_ = v.String()
				}
			}
		}
	})
}

// FuzzDecode: any packet the IUT might send decodes into fields (or a
// malformed mark) without panicking.
func FuzzDecode(f *testing.F) {
	b := builder{vars: map[string]uint64{}, nextPSN: map[uint16]uint32{}}
	for _, src := range []string{"0 < ACK rec=1/0/5/3", "0 < WRITE len=100", "0 < SYN", "0 < NAK reason=2", "0 < READ_REQ sinks=1:5:2 msg_len=5"} {
		st, err := parseStmt("f", 1, src)
		if err != nil {
			f.Fatal(err)
		}
		pkt, _, err := b.build(&st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(pkt)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		v := decode(&Sent{Bytes: pkt})
		_ = v.String()
		if v.err == nil && len(pkt) < wire.CommonSize+wire.TrailerSize {
			t.Fatal("short packet decoded without error")
		}
	})
}

// FuzzControl: any control request line gets an answer or an error from
// the agent's side, never a panic.
func FuzzControl(f *testing.F) {
	for _, s := range []string{"do write id=1 len=4096", "do recv len=0x10", "mem 0x100 0x10000000 16", "counter drop_checksum",
		"state", "completions", "do dial", "do close", "mem 0x300 0xffffffffffffffff 4", "do read len=99999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		iut, err := SimTarget{}.Open(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []string{"do dial", line} {
			if w := strings.Fields(l); len(w) > 0 {
				_, _ = ServeControl(iut, w)
			}
		}
		_, _ = iut.Run(int64(1e6))
	})
}
