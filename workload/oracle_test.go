package workload

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// oracleCase is one planted fault and what the oracle must say about it.
type oracleCase struct {
	name  string
	spec  Spec
	fault softnic.PlantedFault
	// region picks the region to plant in: flow 0's destination, or for
	// READ the responder's source.
	remote bool
	// want matches the oracle's first failure; endCheck is whether the
	// end-of-run check alone also sees it.
	want string
}

func oracleCases() []oracleCase {
	// Small runs whose slots are never reused, so a late placement always
	// lands in a slot whose message completed.
	small := Spec{Name: WriteBW, Size: 64 << 10, Iterations: 16, QueueDepth: 2}
	read := small
	read.Name = ReadBW
	send := small
	send.Name = SendBW
	return []oracleCase{
		// A chunk's bytes never land, yet the message completes.
		{name: "completion-before-last-byte", spec: small, fault: softnic.PlantedFault{Kind: softnic.FaultDropWrite, Nth: 16},
			want: `completed with byte (\d+) of 65536 wrong`},
		{name: "completion-before-last-byte/send", spec: send, fault: softnic.PlantedFault{Kind: softnic.FaultDropWrite, Nth: 40},
			want: `completed with byte (\d+) of 65536 wrong`},
		// A chunk lands in the next message's slot.
		{name: "byte-in-wrong-message", spec: small, fault: softnic.PlantedFault{Kind: softnic.FaultShiftWrite, Nth: 20, Shift: 64<<10 + guard},
			want: `completed with byte (\d+) of 65536 wrong|byte (\d+) placed while no message was due`},
		// A stale copy of a chunk lands again after its message completed:
		// the same bytes, so only the placement watch can see it.
		{name: "stale-overwrite-after-completion", spec: small, fault: softnic.PlantedFault{Kind: softnic.FaultReplayWrite, Nth: 3, Delay: 30 * sim.Microsecond},
			want: `byte (\d+) placed while no message was due \(after its completion\)`},
		// A READ response carries bytes from 4 KiB further on.
		{name: "read-response-from-wrong-offset", spec: read, remote: true, fault: softnic.PlantedFault{Kind: softnic.FaultShiftRead, Nth: 7, Shift: 4096},
			want: `completed with byte (\d+) of 65536 wrong`},
	}
}

// TestOracleCatchesPlantedFaults plants each fault in the NIC's DMA engine
// (softnic.MR.Plant) and checks the per-message oracle reports it, with
// the first bad offset, in both payload modes and with both transports;
// the same runs without the fault check clean.
func TestOracleCatchesPlantedFaults(t *testing.T) {
	defer func() { testAfterSetup = nil }()
	for _, tc := range oracleCases() {
		for _, mode := range []softnic.PayloadMode{softnic.PayloadBytes, softnic.PayloadSynthetic} {
			for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
				t.Run(fmt.Sprintf("%s/%v/%v", tc.name, mode, k), func(t *testing.T) {
					spec := tc.spec
					spec.Transport, spec.Payload, spec.Seed = k, mode, 3
					for _, plant := range []bool{false, true} {
						testAfterSetup = func(r *runner) {
							f := r.eng.(*streamEngine).flows[0]
							mr := f.dst
							if tc.remote {
								mr = f.remote
							}
							if plant {
								mr.Plant(tc.fault)
							}
						}
						cl, _ := lab{hosts: 2, seed: 1}.build(t)
						res, err := Run(cl, spec)
						if res == nil {
							t.Fatalf("plant %v: %v", plant, err)
						}
						c := res.Check
						if !plant {
							if err != nil || !c.OK || c.Failures != 0 || c.Messages != int64(spec.Iterations) {
								t.Fatalf("without a fault: err %v, check %+v", err, c)
							}
							continue
						}
						if c.OK || c.Failures == 0 || !errors.Is(err, ErrDataDiff) {
							t.Fatalf("fault not caught: err %v, check %+v", err, c)
						}
						m := regexp.MustCompile(tc.want).FindStringSubmatch(c.FirstFailure)
						if m == nil {
							t.Fatalf("first failure %q, want /%s/", c.FirstFailure, tc.want)
						}
						off := -1
						for _, g := range m[1:] {
							if g != "" {
								off, _ = strconv.Atoi(g)
							}
						}
						// Faults move whole placements: the first bad
						// byte starts a packet's payload.
						if mtu := res.MTU; off < 0 || off%mtu != 0 {
							t.Errorf("first bad offset %d is not on a %d-byte packet boundary (%q)", off, mtu, c.FirstFailure)
						}
					}
				})
			}
		}
	}
}

// TestOracleSeesWhatTheEndCheckMisses drops one chunk early in a long run
// whose slots are reused: by the end another message has overwritten the
// slot, so the end-of-run check passes, but the message was checked when
// it completed.
func TestOracleSeesWhatTheEndCheckMisses(t *testing.T) {
	defer func() { testAfterSetup = nil }()
	for _, mode := range []softnic.PayloadMode{softnic.PayloadBytes, softnic.PayloadSynthetic} {
		testAfterSetup = func(r *runner) {
			r.eng.(*streamEngine).flows[0].dst.Plant(softnic.PlantedFault{Kind: softnic.FaultDropWrite, Nth: 5})
		}
		cl, _ := lab{hosts: 2, seed: 1}.build(t)
		res, err := Run(cl, Spec{Name: WriteBW, Size: 64 << 10, Iterations: 200, QueueDepth: 4, Payload: mode})
		if res == nil {
			t.Fatal(err)
		}
		c := res.Check
		if c.BadRegions != 0 || c.Failures != 1 || c.OK || !errors.Is(err, ErrDataDiff) {
			t.Errorf("%v: bad regions %d (want 0: the slot was reused), failures %d (want 1), err %v", mode, c.BadRegions, c.Failures, err)
		}
	}
}

// TestOracleSmallMessages runs every point-to-point workload with messages
// that fit a small packet, in both payload modes: the NIC copies such
// packets out of the buffer they were built in, and the copy once lost
// its content runs, so every small synthetic message arrived as zeros.
func TestOracleSmallMessages(t *testing.T) {
	for _, name := range []Name{WriteBW, SendBW, ReadBW, WriteLat, SendLat, ReadLat} {
		for _, size := range []int{1, 2, 256, 450} {
			for _, mode := range []softnic.PayloadMode{softnic.PayloadBytes, softnic.PayloadSynthetic} {
				cl, _ := lab{hosts: 2, seed: 1}.build(t)
				spec := Spec{Name: name, Size: size, Iterations: 20, QueueDepth: 4, Payload: mode}
				if name.IsLatency() {
					spec.QueueDepth = 1
				}
				res, err := Run(cl, spec)
				if res == nil {
					t.Fatalf("%s %d bytes %v: %v", name, size, mode, err)
				}
				if err != nil || !res.Check.OK || res.Check.Messages == 0 {
					t.Errorf("%s %d bytes %v: err %v, check %+v", name, size, mode, err, res.Check)
				}
			}
		}
	}
}

// TestCorruptionAndDuplicationCounted runs write_bw over links that flip
// bits and duplicate packets: the result counts both (fabric side and
// receivers' side), the receivers drop corrupt packets (by ICRC or CRC32C;
// a flip in the IPv4 header is a malformed drop instead), and every
// message checks out.
func TestCorruptionAndDuplicationCounted(t *testing.T) {
	for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		for _, mode := range []softnic.PayloadMode{softnic.PayloadBytes, softnic.PayloadSynthetic} {
			// Corrupted frames delivered, as netem does, so the
			// transports' checksums drop them.
			cl, _ := lab{hosts: 2, seed: 1, corrupt: 0.01, dup: 0.01, lossAt: fabric.LossAtEnqueue}.build(t)
			res, err := Run(cl, Spec{Name: WriteBW, Transport: k, Size: 64 << 10, Iterations: 100, QueueDepth: 8, Payload: mode})
			if err != nil {
				t.Fatalf("%v %v: %v", k, mode, err)
			}
			if res.Corrupted == 0 || res.CorruptDropped == 0 || res.CorruptDropped > res.Corrupted ||
				res.Duplicated == 0 || res.DupReceived == 0 || res.Check.Messages != 100 {
				t.Errorf("%v %v: corrupted %d, dropped as corrupt %d, duplicated %d, duplicates received %d, checked %d",
					k, mode, res.Corrupted, res.CorruptDropped, res.Duplicated, res.DupReceived, res.Check.Messages)
			}
		}
	}
}
