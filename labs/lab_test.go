package labs

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

// TestExplicitLab checks that every part of an explicit lab file lands
// where it should: defaults, class settings, merge keys, per-link
// parameters, overrides, the lab-wide impairment and the fault timeline.
func TestExplicitLab(t *testing.T) {
	lab, err := Load("testdata/explicit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if lab.Name != "explicit" || lab.Seed != 7 || lab.Transport != transport.RoCEv2 ||
		lab.DetectionDelay != 50*sim.Microsecond || lab.Builder != "explicit" {
		t.Errorf("header: got name %q seed %d transport %v detection %v builder %q", lab.Name, lab.Seed, lab.Transport, lab.DetectionDelay, lab.Builder)
	}
	topo := lab.Topology()
	wantHosts := []fabric.Host{
		{Name: "a", Addr: netip.MustParseAddr("198.18.0.1"), Ports: 2},
		{Name: "b", Addr: netip.MustParseAddr("198.18.0.2"), Ports: 2},
	}
	if diff := cmp.Diff(wantHosts, topo.Hosts, addrCmp); diff != "" {
		t.Errorf("hosts (-want +got):\n%s", diff)
	}
	if topo.Planes != 2 {
		t.Errorf("planes = %d, want 2", topo.Planes)
	}
	delay10 := fabric.Impairment{Delay: 10 * sim.Microsecond}
	red := fabric.ECNConfig{Mode: fabric.ECNRED, Min: 20 << 10, Max: 200 << 10, PMax: 0.1}
	host := fabric.LinkParams{Rate: 40e9, Delay: 3 * sim.Microsecond, QueueBytes: 256 << 10, ECN: red, Impair: delay10}
	aS1 := host
	aS1.Rate = 25e9
	bS0 := host
	bS0.ECN = fabric.ECNConfig{}
	bS0.Impair = fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.01}}
	bS1 := host
	bS1.QueueBytes = 1 << 20 // tc reads 1MB as 1024²
	want := []fabric.Link{
		{Name: "a-s0", A: fabric.Endpoint{Node: "a", Port: 0}, B: fabric.Endpoint{Node: "s0", Port: 0}, Params: host},
		{Name: "a-s1", A: fabric.Endpoint{Node: "a", Port: 1}, B: fabric.Endpoint{Node: "s1", Port: 0}, Params: aS1},
		{Name: "b-s0", A: fabric.Endpoint{Node: "b", Port: 0}, B: fabric.Endpoint{Node: "s0", Port: 1}, Params: bS0},
		{Name: "b-s1", A: fabric.Endpoint{Node: "b", Port: 1}, B: fabric.Endpoint{Node: "s1", Port: 1}, Params: bS1},
	}
	if diff := cmp.Diff(want, topo.Links); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	ge, err := fabric.ParseImpairment("loss gemodel 1% 10% 70% 0.1%")
	if err != nil {
		t.Fatal(err)
	}
	wantFaults := []Fault{
		{At: sim.Millisecond, Target: TargetLink, Name: "a-s0", Action: ActionDown, Line: 25},
		{At: 2 * sim.Millisecond, Target: TargetLink, Name: "a-s0", Action: ActionUp, Line: 26},
		{At: 500 * sim.Microsecond, Target: TargetLink, Name: "b-s1", Action: ActionImpair, Impair: ge, ImpairText: "loss gemodel 1% 10% 70% 0.1%", Dir: DirAB, Line: 27},
		{At: 3 * sim.Millisecond, Target: TargetSwitch, Name: "s1", Action: ActionDown, Line: 28},
		{At: 4 * sim.Millisecond, Target: TargetPlane, Plane: 0, Action: ActionDown, Line: 29},
	}
	if diff := cmp.Diff(wantFaults, lab.Faults); diff != "" {
		t.Errorf("faults (-want +got):\n%s", diff)
	}
	// Topology returns a copy: changing it must not change the lab.
	topo.Links[0].Params.Rate = 1
	if lab.Topology().Links[0].Params.Rate == 1 {
		t.Error("Topology returned the lab's own links")
	}
}

// badLabs are lab files with one mistake each, and where it must be
// reported.
var badLabs = []struct {
	name  string
	src   string
	line  int
	col   int
	field string
	msg   string // a substring of the message
}{
	{
		name: "unknown key",
		src:  "name: x\nseeed: 3\ntopology: {hosts: [{name: a}]}\n",
		line: 2, col: 1, field: "seeed", msg: "unknown field (did you mean \"seed\"?) (want one of ",
	},
	{
		name: "unknown nested key",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default:\n    rate: 1gbit\n    dealy: 1us\n",
		line: 6, col: 5, field: "links.default.dealy", msg: "unknown field",
	},
	{
		name: "bad rate",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default:\n    rate: 100gbt\n",
		line: 5, col: 11, field: "links.default.rate", msg: `"100gbt" is not a rate (want e.g. 100gbit`,
	},
	{
		name: "bad duration",
		src:  "name: x\ntopology: {hosts: [{name: a}, {name: b}], links: [{a: 'a:0', b: 'b:0'}]}\nfaults:\n  - {at: 2 parsecs, link: a-b, action: down}\n",
		line: 4, col: 10, field: "faults[0].at", msg: `"2 parsecs" is not a duration`,
	},
	{
		name: "duration without unit",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks: {default: {delay: 5}}\n",
		line: 3, col: 26, field: "links.default.delay", msg: "is not a duration",
	},
	{
		name: "dangling link in a fault",
		src:  "name: x\ntopology:\n  hosts: [{name: a}, {name: b}]\n  links: [{a: 'a:0', b: 'b:0'}]\nfaults:\n  - at: 1ms\n    link: a-c\n    action: down\n",
		line: 7, col: 11, field: "faults[0].link", msg: `no link named "a-c" in this lab (did you mean "a-b"?)`,
	},
	{
		name: "dangling override",
		src:  "name: x\ntopology:\n  hosts: [{name: a}, {name: b}]\n  links: [{a: 'a:0', b: 'b:0'}]\nlinks:\n  overrides:\n    - {link: nope, rate: 1gbit}\n",
		line: 7, col: 14, field: "links.overrides[0].link", msg: `no link named "nope"`,
	},
	{
		name: "dangling switch in a fault",
		src:  "name: x\ntopology:\n  hosts: [{name: a}]\nfaults:\n  - {at: 1ms, switch: spine9, action: down}\n",
		line: 5, col: 23, field: "faults[0].switch", msg: `no switch named "spine9"`,
	},
	{
		name: "missing plane",
		src:  "name: x\ntopology:\n  hosts: [{name: a}]\nfaults:\n  - {at: 1ms, plane: 3, action: down}\n",
		line: 5, col: 22, field: "faults[0].plane", msg: "no plane 3 in this lab",
	},
	{
		name: "dangling link end",
		src:  "name: x\ntopology:\n  hosts: [{name: a}, {name: b}]\n  links:\n    - {a: 'a:0', b: 'c:0'}\n",
		line: 5, col: 21, field: "topology.links[0].b", msg: `no host or switch named "c"`,
	},
	{
		name: "bad impairment string",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nimpair: \"loss sometimes 1%\"\n",
		line: 3, col: 9, field: "impair", msg: `parsing impairment "loss sometimes 1%"`,
	},
	{
		name: "bad impairment in a fault",
		src:  "name: x\ntopology:\n  hosts: [{name: a}, {name: b}]\n  links: [{a: 'a:0', b: 'b:0'}]\nfaults:\n  - {at: 1ms, link: a-b, action: impair, impair: 'loss 150%'}\n",
		line: 6, col: 50, field: "faults[0].impair", msg: "parsing impairment",
	},
	{
		name: "wrong type: list for a mapping",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default: [1, 2]\n",
		line: 4, col: 12, field: "links.default", msg: "want a mapping (key: value, ...), got a list",
	},
	{
		name: "wrong type: string for an integer",
		src:  "name: x\nseed: many\ntopology: {hosts: [{name: a}]}\n",
		line: 2, col: 7, field: "seed", msg: `"many" is not an unsigned integer`,
	},
	{
		name: "wrong type: mapping for a value",
		src:  "name: {first: x}\ntopology: {hosts: [{name: a}]}\n",
		line: 1, col: 7, field: "name", msg: "want a single value, got a mapping",
	},
	{
		name: "bad size",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks: {host: {queue: 12 furlongs}}\n",
		line: 3, col: 23, field: "links.host.queue", msg: `"12 furlongs" is not a size`,
	},
	{
		name: "bad action",
		src:  "name: x\ntopology:\n  hosts: [{name: a}, {name: b}]\n  links: [{a: 'a:0', b: 'b:0'}]\nfaults:\n  - {at: 1ms, link: a-b, action: explode}\n",
		line: 6, col: 34, field: "faults[0].action", msg: `"explode" is not an action`,
	},
	{
		name: "impair action without impairment",
		src:  "name: x\ntopology:\n  hosts: [{name: a}, {name: b}]\n  links: [{a: 'a:0', b: 'b:0'}]\nfaults:\n  - {at: 1ms, link: a-b, action: impair}\n",
		line: 6, col: 34, field: "faults[0].impair", msg: "missing",
	},
	{
		name: "two targets",
		src:  "name: x\ntopology:\n  hosts: [{name: a}, {name: b}]\n  links: [{a: 'a:0', b: 'b:0'}]\nfaults:\n  - {at: 1ms, link: a-b, plane: 0, action: down}\n",
		line: 6, col: 5, field: "faults[0]", msg: "more than one target",
	},
	{
		name: "missing name",
		src:  "topology: {hosts: [{name: a}]}\n",
		line: 1, col: 1, field: "name", msg: "missing",
	},
	{
		name: "duplicate key",
		src:  "name: x\nname: y\ntopology: {hosts: [{name: a}]}\n",
		line: 2, col: 1, field: "name", msg: "duplicate key",
	},
	{
		name: "duplicate host",
		src:  "name: x\ntopology:\n  hosts:\n    - {name: a}\n    - {name: a}\n",
		line: 5, col: 14, field: "topology.hosts[1].name", msg: "duplicate node name \"a\" (first declared at line 4)",
	},
	{
		name: "duplicate address",
		src:  "name: x\ntopology:\n  hosts:\n    - {name: a, addr: 10.0.0.1}\n    - {name: b, addr: 10.0.0.1}\n",
		line: 5, col: 23, field: "topology.hosts[1].addr", msg: "address 10.0.0.1 is already a's",
	},
	{
		name: "not ipv4",
		src:  "name: x\ntopology:\n  hosts:\n    - {name: a, addr: '2001:db8::1'}\n",
		line: 4, col: 23, field: "topology.hosts[0].addr", msg: "is not an IPv4 address",
	},
	{
		name: "builder and explicit",
		src:  "name: x\ntopology:\n  leafspine: {leaves: 1, hosts_per_leaf: 1}\n  hosts: [{name: a}]\n",
		line: 4, col: 10, field: "topology", msg: "not both",
	},
	{
		name: "bad transport",
		src:  "name: x\ntransport: tcp\ntopology: {hosts: [{name: a}]}\n",
		line: 2, col: 12, field: "transport", msg: `"tcp" is not a transport`,
	},
	{
		name: "ecn with two modes",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default:\n    ecn: {step: 1KiB, red: {min: 1KiB, max: 2KiB, pmax: 1%}}\n",
		line: 5, col: 10, field: "links.default.ecn", msg: "want exactly one of step or red",
	},
	{
		name: "red max below min",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default:\n    ecn: {red: {min: 10KiB, max: 2KiB, pmax: 1%}}\n",
		line: 5, col: 16, field: "links.default.ecn.red", msg: "max (2048 bytes) must be above min (10240 bytes)",
	},
	{
		name: "probability out of range",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default:\n    ecn: {red: {min: 1KiB, max: 2KiB, pmax: 150%}}\n",
		line: 5, col: 45, field: "links.default.ecn.red.pmax", msg: "out of range",
	},
	{
		name: "host port out of range",
		src:  "name: x\ntopology:\n  hosts: [{name: a}, {name: b}]\n  links: [{a: 'a:1', b: 'b:0'}]\n",
		line: 4, col: 15, field: "topology.links[0].a", msg: "host a has ports 0 to 0, not 1",
	},
	{
		name: "endpoint used twice",
		src:  "name: x\ntopology:\n  hosts: [{name: a}, {name: b}, {name: c}]\n  links:\n    - {a: 'a:0', b: 'b:0'}\n    - {a: 'c:0', b: 'b:0'}\n",
		line: 6, col: 21, field: "topology.links[1].b", msg: "b:0 is already used by topology.links[0]",
	},
	{
		name: "host port not wired",
		src:  "name: x\ntopology:\n  hosts: [{name: a}]\n",
		line: 3, col: 11, field: "topology.hosts[0]", msg: `host a: port 0 is not wired to any link`,
	},
	{
		name: "builder refuses",
		src:  "name: x\ntopology:\n  leafspine: {leaves: 2, hosts_per_leaf: 300}\n",
		line: 3, col: 14, field: "topology.leafspine", msg: "hosts per leaf 300: want 1..254",
	},
	{
		name: "lab too large",
		src:  "name: x\ntopology:\n  leafspine: {planes: 64, leaves: 512, hosts_per_leaf: 254}\n",
		line: 3, col: 14, field: "topology.leafspine", msg: "would make 8355840 links",
	},
	{
		name: "oversubscription and fabric rate",
		src:  "name: x\ntopology:\n  leafspine: {leaves: 2, hosts_per_leaf: 2, oversubscription: 2}\nlinks: {fabric: {rate: 1gbit}}\n",
		line: 3, col: 63, field: "topology.leafspine.oversubscription", msg: "keep one",
	},
	{
		name: "pfc xon above xoff",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default:\n    pfc: {xoff: 8KiB, xon: 16KiB}\n",
		line: 5, col: 10, field: "links.default.pfc", msg: "xon (16384 bytes) must be below xoff (8192 bytes)",
	},
	{
		name: "pfc bad word",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default:\n    pfc: lossless\n",
		line: 5, col: 10, field: "links.default.pfc", msg: `"lossless" is not on or off`,
	},
	{
		name: "pfc without xoff",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  host:\n    pfc: {xon: 8KiB}\n",
		line: 5, col: 10, field: "links.host.pfc.xoff", msg: "missing",
	},
	{
		name: "loss_at bad word",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default:\n    loss_at: receiver\n",
		line: 5, col: 14, field: "links.default.loss_at", msg: `"receiver" is not a loss point (want wire`,
	},
	{
		name: "unknown transport section",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  tcp: {cwnd: 10}\n",
		line: 4, col: 3, field: "transports.tcp", msg: "unknown field (want one of metaroce, rocev2)",
	},
	{
		name: "unknown metaroce option",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  metaroce: {pathz: 4}\n",
		line: 4, col: 14, field: "transports.metaroce.pathz", msg: "unknown field",
	},
	{
		name: "fat tree above k=64",
		src:  "name: x\ntopology:\n  fattree: {k: 66}\n",
		line: 3, col: 16, field: "topology.fattree.k", msg: "66 is out of range (want 2 to 64)",
	},
	{
		name: "metaroce paths out of range",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  metaroce: {paths: 0}\n",
		line: 4, col: 21, field: "transports.metaroce.paths", msg: "0 is out of range (want 1 to 256)",
	},
	{
		name: "hint utilization above 1",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  metaroce: {hint_utilization: 1.5}\n",
		line: 4, col: 32, field: "transports.metaroce.hint_utilization", msg: "out of range",
	},
	{
		name: "metaroce repath confidence of 1",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  metaroce: {repath_confidence: 100%}\n",
		line: 4, col: 13, field: "transports.metaroce", msg: "RepathConfidence 1 not in (0, 1)",
	},
	{
		name: "rocev2 ack timeout exponent",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  rocev2: {ack_timeout: 40}\n",
		line: 4, col: 25, field: "transports.rocev2.ack_timeout", msg: "40 is out of range (want 1 to 31)",
	},
	{
		name: "rocev2 ack timeout word",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  rocev2: {ack_timeout: soon}\n",
		line: 4, col: 25, field: "transports.rocev2.ack_timeout", msg: `"soon" is not a duration`,
	},
	{
		name: "rocev2 retry count",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  rocev2: {retry_cnt: 9}\n",
		line: 4, col: 23, field: "transports.rocev2.retry_cnt", msg: "9 is out of range (want 0 to 7)",
	},
	{
		name: "rocev2 qps per peer",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  rocev2: {qps_per_peer: per-rail}\n",
		line: 4, col: 26, field: "transports.rocev2.qps_per_peer", msg: `"per-rail" is not a QP count (want a number such as 4, or per-plane)`,
	},
	{
		name: "rocev2 dcqcn word",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  rocev2: {dcqcn: maybe}\n",
		line: 4, col: 19, field: "transports.rocev2.dcqcn", msg: `"maybe" is not on or off`,
	},
	{
		name: "rocev2 dcqcn constant",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  rocev2:\n    dcqcn: {g: 1/16}\n",
		line: 5, col: 16, field: "transports.rocev2.dcqcn.g", msg: "is not a probability",
	},
	{
		name: "rocev2 dcqcn rate",
		src:  "name: x\ntopology: {hosts: [{name: a}]}\ntransports:\n  rocev2:\n    dcqcn: {ai: fast}\n",
		line: 5, col: 17, field: "transports.rocev2.dcqcn.ai", msg: `"fast" is not a rate`,
	},
	{
		name: "syntax error",
		src:  "name: x\ntopology:\n\thosts: []\n",
		line: 3, col: 0, field: "", msg: "YAML syntax: found character that cannot start any token",
	},
	{
		name: "unclosed flow mapping",
		src:  "name: x\ntopology:\n  leafspine: {planes: 2, leaves: 2\nlinks:\n  default: {rate: 10gbit}\nseed: 1\n",
		line: 3, col: 14, field: "", msg: `YAML syntax: this '{' is never closed`,
	},
	{
		name: "unclosed flow sequence",
		src:  "name: x # a {comment\ntopology: {hosts: [{name: \"a{\"}, {name: b}\nseed: 1\n",
		line: 2, col: 19, field: "", msg: `YAML syntax: this '[' is never closed`,
	},
	{
		name: "empty file",
		src:  "",
		line: 0, col: 0, field: "", msg: "empty lab file",
	},
	{
		name: "not a mapping",
		src:  "- just\n- a list\n",
		line: 1, col: 1, field: "", msg: "want a mapping",
	},
}

// TestBadLabs checks that each mistake is reported with its line, column
// and field, as one *Error.
func TestBadLabs(t *testing.T) {
	for _, tc := range badLabs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("no error for:\n%s", tc.src)
			}
			errs := Errors(err)
			if len(errs) == 0 {
				t.Fatalf("error is not a *labs.Error: %v", err)
			}
			e := errs[0]
			got := struct {
				File      string
				Line, Col int
				Field     string
			}{e.File, e.Line, e.Col, e.Field}
			want := got
			want.File, want.Line, want.Col, want.Field = "bad.yaml", tc.line, tc.col, tc.field
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("position (-want +got):\n%s\nerror: %v", diff, err)
			}
			if !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("message %q does not contain %q", e.Msg, tc.msg)
			}
			var as *Error
			if !errors.As(err, &as) || as != e {
				t.Errorf("errors.As did not find the first error")
			}
			// The text leads with file:line:col so editors can jump there.
			prefix := "bad.yaml:"
			if !strings.HasPrefix(e.Error(), prefix) {
				t.Errorf("error text %q does not start with %q", e.Error(), prefix)
			}
		})
	}
}

// TestErrorText pins the error format the CLI prints.
func TestErrorText(t *testing.T) {
	_, err := Parse("labs/bad.yaml", []byte("name: x\ntopology: {hosts: [{name: a}]}\nlinks:\n  default:\n    rate: 100gbt\n"))
	want := `labs/bad.yaml:5:11: links.default.rate: "100gbt" is not a rate (want e.g. 100gbit, 25gbit, 400mbit)`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// TestManyErrors checks that every problem of a file is reported, in
// file order.
func TestManyErrors(t *testing.T) {
	src := "name: x\nseed: -1\ntopology: {hosts: [{name: a}]}\nlinks:\n  default: {rate: fast, delay: soon}\nbogus: 1\n"
	_, err := Parse("m.yaml", []byte(src))
	var got []string
	for _, e := range Errors(err) {
		got = append(got, e.Field)
	}
	want := []string{"seed", "links.default.rate", "links.default.delay", "bogus"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields (-want +got):\n%s\nerror: %v", diff, err)
	}
}

// TestAliasBomb checks that a document whose aliases expand to a huge
// tree is refused instead of walked.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: x\ntopology: {hosts: [{name: a}]}\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil {
		t.Fatal("no error")
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		bad  bool
	}{
		{in: "512KiB", want: 512 << 10},
		{in: "1MB", want: 1 << 20},
		{in: "1mb", want: 1 << 20},
		{in: "512k", want: 512 << 10},
		{in: "512kb", want: 512 << 10},
		{in: "64K", want: 64 << 10},
		{in: "1g", want: 1 << 30},
		{in: "1.5MiB", want: 3 << 19},
		{in: "64kb", want: 64 << 10},
		{in: "9000", want: 9000},
		{in: "9000B", want: 9000},
		{in: "2GiB", want: 2 << 30},
		{in: "", bad: true},
		{in: "KiB", bad: true},
		{in: "-1KiB", bad: true},
		{in: "1TiB2", bad: true},
		{in: "2000GiB", bad: true},
		{in: "NaN", bad: true},
	} {
		got, err := ParseSize(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, bad=%v", tc.in, got, err, tc.want, tc.bad)
		}
	}
	for _, n := range []int{1, 1500, 1 << 10, 512 << 10, 3 << 20, 1 << 30} {
		back, err := ParseSize(FormatSize(n))
		if err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d)=%q) = %d, %v", n, FormatSize(n), back, err)
		}
	}
}

// TestExplicitPlanes: without switches, hosts cabled port to port have as
// many planes as ports; with switches, planes follow the switches unless
// the file says.
func TestExplicitPlanes(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int
	}{
		{"name: x\ntopology:\n  hosts: [{name: a, ports: 2}, {name: b, ports: 2}]\n  links: [{a: 'a:0', b: 'b:0'}, {name: l1, a: 'a:1', b: 'b:1'}]\n", 2},
		{"name: x\ntopology:\n  hosts: [{name: a}]\n  switches: [{name: s, plane: 2}]\n  links: [{a: 'a:0', b: 's:0'}]\n", 3},
		{"name: x\ntopology:\n  planes: 4\n  hosts: [{name: a}]\n  switches: [{name: s}]\n  links: [{a: 'a:0', b: 's:0'}]\n", 4},
	} {
		lab, err := Parse("p.yaml", []byte(tc.src))
		if err != nil {
			t.Errorf("%v\n%s", err, tc.src)
			continue
		}
		if got := lab.Topology().Planes; got != tc.want {
			t.Errorf("planes = %d, want %d for\n%s", got, tc.want, tc.src)
		}
	}
}

// TestTransportsSection checks that the transports section and the pfc
// link key land in the lab's options and link parameters.
func TestTransportsSection(t *testing.T) {
	src := `name: t
topology:
  leafspine: {planes: 4, leaves: 2, hosts_per_leaf: 2}
links:
  default: {pfc: {xoff: 64KiB, xon: 56KiB}}
  host: {pfc: {xoff: 32KiB}}
  overrides:
    - {link: p0-leaf0-spine0, pfc: off}
transports:
  metaroce: {paths: 8, hint_utilization: 1.0, rto_max: 2ms, ack_delay: 4us, rate_hint: on, ecn_gain: 6.25%}
  rocev2:
    ack_timeout: 131us
    retry_cnt: 0
    rnr_retry: 7
    qps_per_peer: per-plane
    dcqcn: {g: 0.00390625, increase_interval: 55us, byte_counter: off, ai: 40mbit, clamp_target: on}
    max_rd_atomic: 8
`
	lab, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	tr := lab.Transports
	wantMR := metaroce.Options{Paths: 8, HintUtilization: 1, RTOMax: 2 * sim.Millisecond, AckDelay: 4 * sim.Microsecond, ECNGain: 0.0625}
	if diff := cmp.Diff(wantMR, tr.MetaRoCE); diff != "" {
		t.Errorf("metaroce options (-want +got):\n%s", diff)
	}
	dc := rocev2.DefaultDCQCN()
	dc.G, dc.IncreaseInterval, dc.ByteCounter, dc.AI, dc.ClampTarget = 1.0/256, 55*sim.Microsecond, 0, 40e6, true
	wantRo := rocev2.Options{AckTimeout: 131 * sim.Microsecond, RetryCount: rocev2.NoRetry, RNRRetry: 7, DCQCN: dc, MaxReads: 8}
	if diff := cmp.Diff(wantRo, tr.RoCEv2); diff != "" {
		t.Errorf("rocev2 options (-want +got):\n%s", diff)
	}
	if tr.RoCEv2QPs != PerPlane || tr.ConnsPerPeer(transport.RoCEv2, 4) != 4 || tr.ConnsPerPeer(transport.MetaRoCE, 4) != 1 {
		t.Errorf("qps_per_peer: %d, conns %d/%d", tr.RoCEv2QPs, tr.ConnsPerPeer(transport.RoCEv2, 4), tr.ConnsPerPeer(transport.MetaRoCE, 4))
	}
	for _, k := range lab.Topology().Links {
		want := fabric.PFCConfig{XOff: 64 << 10, XOn: 56 << 10}
		switch {
		case k.Name == "p0-leaf0-spine0":
			want = fabric.PFCConfig{}
		case k.Name[0] == 'h':
			want = fabric.PFCConfig{XOff: 32 << 10, XOn: 24 << 10}
		}
		if k.Params.PFC != want {
			t.Errorf("%s: pfc %+v, want %+v", k.Name, k.Params.PFC, want)
		}
	}
	// An exponent sets the verbs timeout; dcqcn off and a QP count.
	if _, err := Parse("t.yaml", []byte("name: t\ntopology: {backtoback: {}}\ntransports:\n  rocev2: {ack_timeout: 14, dcqcn: off, qps_per_peer: 3, pfc: on}\n")); err == nil {
		t.Fatalf("rocev2.pfc accepted (pfc is a link key)")
	}
	lab, err = Parse("t.yaml", []byte("name: t\ntopology: {backtoback: {}}\nlinks: {default: {pfc: on}}\ntransports:\n  rocev2: {ack_timeout: 14, dcqcn: off, qps_per_peer: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := lab.Transports.RoCEv2; r.Timeout != 14 || r.AckTimeout != 0 || !r.NoDCQCN || lab.Transports.ConnsPerPeer(transport.RoCEv2, 8) != 3 {
		t.Errorf("rocev2 %+v, qps %d", r, lab.Transports.RoCEv2QPs)
	}
	if p := lab.Topology().Links[0].Params.PFC; p != fabric.DefaultPFC() {
		t.Errorf("pfc: on gave %+v, want %+v", p, fabric.DefaultPFC())
	}
}

// TestLossAtKey: links.*.loss_at lands in the link parameters; the
// default is the wire, enqueue is tc-netem's drop before the queue.
func TestLossAtKey(t *testing.T) {
	src := `name: t
topology:
  leafspine: {leaves: 2, hosts_per_leaf: 1}
impair: loss random 1%
links:
  fabric: {loss_at: enqueue}
  overrides:
    - {link: p0-leaf0-spine0, loss_at: wire}
`
	lab, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range lab.Topology().Links {
		want := fabric.LossAtEnqueue
		if k.Name == "p0-leaf0-spine0" || k.Name[0] == 'h' {
			want = fabric.LossAtWire
		}
		if k.Params.LossAt != want || k.Params.Impair.Loss.P != 0.01 {
			t.Errorf("%s: loss_at %v (loss %v), want %v", k.Name, k.Params.LossAt, k.Params.Impair.Loss.P, want)
		}
		if want == fabric.LossAtEnqueue {
			n++
		}
	}
	if n == 0 {
		t.Error("no link took loss_at: enqueue")
	}
}
