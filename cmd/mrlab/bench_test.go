package main

import (
	"encoding/json"
	"testing"
)

// TestBench runs `mrlab bench` on a small lab and checks that it reports
// what it says: a data check that passed (it fails otherwise), the data
// packets a 1 MiB permutation needs, events per packet, memory.
func TestBench(t *testing.T) {
	for _, payload := range []string{"synthetic", "bytes"} {
		code, out, errOut := runCLI(t, "bench", "--json", "--size", "1MiB", "--paths", "16", "--payload", payload, "leafspine")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", payload, code, errOut)
		}
		var r benchResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: %v\n%s", payload, err, out)
		}
		// 8 hosts x 1 MiB in 4096-byte packets, plus at most the
		// retransmissions of the lab's 0.1% loss: no handshake or control
		// packet counts as data.
		if r.Hosts != 8 || r.Payload != payload || r.DataPackets < 8*256 || r.DataPackets > 8*256+r.Retransmits {
			t.Errorf("%s: %d data packets, want %d plus at most %d retransmissions: %+v", payload, r.DataPackets, 8*256, r.Retransmits, r)
		}
		if r.EventsPerPkt < 4 || r.EventsPerPkt > 30 || r.PeakRSSMiB <= 0 || r.HostState <= 0 || r.ConnState <= 0 || r.SetupSeconds <= 0 {
			t.Errorf("%s: implausible figures %+v", payload, r)
		}
	}
	if code, _, _ := runCLI(t, "bench", "--payload", "paper", "leafspine"); code != 2 {
		t.Errorf("bad --payload: exit %d, want 2", code)
	}
}
