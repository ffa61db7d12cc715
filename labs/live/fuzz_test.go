package live

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
)

// FuzzReadState feeds arbitrary bytes as a lab's state file: ReadState
// returns a state or an error, never panics, and never returns a state
// naming a namespace that is not a plain file name (teardown deletes what
// a state names).
func FuzzReadState(f *testing.F) {
	f.Add([]byte(`{"lab":"x","pid":1,"namespaces":["mrl-x-h0"],"hosts":[{"name":"h0","namespace":"mrl-x-h0"}]}`))
	f.Add([]byte(`{"lab":"x","namespaces":["../etc"]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(StatePath(dir, "x"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := ReadState(dir, "x")
		if err != nil {
			return
		}
		if s.Lab != "x" {
			t.Fatalf("state for lab %q accepted as x", s.Lab)
		}
		for _, ns := range s.Namespaces {
			if bytes.ContainsAny([]byte(ns), "/\x00") || ns == "." || ns == ".." || ns == "" {
				t.Fatalf("namespace %q accepted", ns)
			}
		}
	})
}

// FuzzControlRequest feeds arbitrary JSON bodies to the fault and perf
// handlers' decoding and to the real lab engine (the default lab, built
// on a sim loop): every request is applied or refused with an error,
// never a panic.
func FuzzControlRequest(f *testing.F) {
	f.Add([]byte(`{"target":"link","name":"p0-leaf0-spine0","action":"down"}`), true)
	f.Add([]byte(`{"target":"link","name":"h0-p0","action":"impair","impair":["loss","1%","delay","10us"]}`), true)
	f.Add([]byte(`{"target":"plane","name":"1","action":"up"}`), true)
	f.Add([]byte(`{"target":"switch","name":"p1-spine1","action":"down"}`), true)
	f.Add([]byte(`{"from":"h0","to":"h4","op":"read","size":4096,"count":3,"depth":2}`), false)
	f.Add([]byte(`{"from":"h0","to":"h0","op":"write","size":-1}`), false)
	lab, err := labs.Builtin("leafspine")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, fault bool) {
		eng, err := NewLabEngine(lab, EngineConfig{MaxRate: DefaultMaxRate})
		if err != nil {
			t.Fatal(err)
		}
		loop := sim.NewLoop()
		if err := eng.Start(loop, packet.NewPool(), func(int, sim.Time, []byte) {}); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if fault {
			var req FaultRequest
			if dec.Decode(&req) != nil {
				return
			}
			eng.Fault(loop.Now(), req)
		} else {
			var req PerfRequest
			if dec.Decode(&req) != nil {
				return
			}
			if req.Count > 8 || req.Size > 1<<16 || req.Duration != 0 {
				return // keep each run small: this checks validation, not throughput
			}
			_, _ = eng.Perf(loop.Now(), req, func(PerfResult) {})
		}
		loop.RunUntil(loop.Now() + sim.Millisecond)
		eng.Status(loop.Now())
	})
}
