package labs

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the lab parser: it must never panic,
// every error must carry the file name (and a position within the input,
// when it has one), and every lab it accepts must be one the fabric would
// build.
func FuzzParse(f *testing.F) {
	for _, name := range Names() {
		src, err := Source(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	paths, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	for _, tc := range badLabs {
		f.Add([]byte(tc.src))
	}
	f.Add([]byte("name: t\ntopology: {backtoback: {}}\nlinks: {default: {pfc: {xoff: 64KiB}}}\ntransports:\n  metaroce: {paths: 4, rto_max: 4ms}\n  rocev2: {ack_timeout: 131us, qps_per_peer: per-plane, dcqcn: {g: 1%, ai: 40mbit}}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		// YAML breaks lines at \n, \r and \r\n; counting both bytes
		// over-counts \r\n, which is fine for a bound.
		lines := 1
		for _, c := range src {
			if c == '\n' || c == '\r' {
				lines++
			}
		}
		lab, err := Parse("fuzz.yaml", src)
		if err != nil {
			errs := Errors(err)
			if len(errs) == 0 {
				t.Fatalf("error is not a *labs.Error: %v", err)
			}
			for _, e := range errs {
				if e.File != "fuzz.yaml" || e.Line < 0 || e.Line > lines+1 || e.Col < 0 {
					t.Fatalf("bad position in %#v (input has %d lines)", e, lines)
				}
			}
			return
		}
		topo := lab.Topology()
		if err := topo.Validate(); err != nil {
			t.Fatalf("accepted a lab the fabric rejects: %v", err)
		}
		if err := lab.Transports.MetaRoCE.Validate(); err != nil {
			t.Fatalf("accepted MetaRoCE options the transport rejects: %v", err)
		}
		if err := lab.Transports.RoCEv2.Validate(); err != nil {
			t.Fatalf("accepted RoCEv2 options the transport rejects: %v", err)
		}
		_ = lab.Summary()
		if err := lab.WriteDot(io.Discard); err != nil {
			t.Fatal(err)
		}
		for i := range lab.Faults {
			if _, err := lab.linksOf(&lab.Faults[i]); err != nil {
				t.Fatalf("accepted a fault on a missing target: %v", err)
			}
		}
	})
}
