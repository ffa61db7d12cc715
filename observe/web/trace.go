package web

import (
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/internal/sanitize"
	"github.com/mrlab/mrlab/internal/sim"
)

// TraceEvent is one protocol trace line (package prototrace) read back:
// who decided what, when, about which path and packet. The ladder diagram
// draws them.
type TraceEvent struct {
	T sim.Time `json:"t"`
	// Host made the decision (transport lines); for fabric lines the
	// packet's source, and Peer its destination.
	Host string `json:"host,omitempty"`
	Peer string `json:"peer,omitempty"`
	// Conn is the deciding host's connection id; on fabric lines the
	// packet's destination connection id (HasConn says whether the line
	// named one).
	Conn    uint32 `json:"conn"`
	HasConn bool   `json:"-"`
	Path    int    `json:"path"` // -1: not about one path
	PSN     int64  `json:"psn"`  // -1: no packet number
	Kind    string `json:"kind"`
	// Fabric is set on the fabric's lines; Link is then where it
	// happened ("p0-leaf0-spine1:AtoB", or a switch).
	Fabric bool   `json:"fabric,omitempty"`
	Link   string `json:"link,omitempty"`
	Ack    bool   `json:"ack,omitempty"` // the packet was an ACK (fabric lines)
	Text   string `json:"text"`
}

// ParseTraceLine reads one trace line. It reports false for a line that
// is not a trace line (no "t=TIME who" prefix). Transport lines read
//
//	t=12.301us h3->h7 conn 4 path 9: SACK hole psn 1834, retransmit
//	t=15.02us h3->h7 conn 4 path 9 entropy 49213 -> 50877 after ...
//	t=16us h3 conn 4: rate hint ...
//
// fabric lines "t=... fabric: drop (queue-full) at LINK h0->h1 conn 1
// path 2 psn 18 WRITE", and notes "t=... who: text".
func ParseTraceLine(line string) (TraceEvent, bool) {
	// A trace line can hold names a lab host chose (a program's name):
	// sanitized before any of it reaches the page.
	line = sanitize.Terminal(strings.TrimRight(line, "\r\n"))
	ev := TraceEvent{Path: -1, PSN: -1}
	rest, ok := strings.CutPrefix(line, "t=")
	if !ok {
		return ev, false
	}
	ts, rest, ok := strings.Cut(rest, " ")
	if !ok || rest == "" {
		return ev, false
	}
	t, err := sim.ParseTime(ts)
	if err != nil {
		return ev, false
	}
	ev.T = t
	ev.Text = rest
	if msg, ok := strings.CutPrefix(rest, "fabric: "); ok {
		parseFabric(&ev, msg)
		return ev, true
	}
	// The deciding host (and peer), "conn N", maybe "path N", then the
	// message, after ": " or not.
	who, msg, _ := strings.Cut(rest, " ")
	if strings.HasSuffix(who, ":") {
		// A note: "fault: link x down".
		ev.Kind = "note"
		return ev, true
	}
	ev.Host, ev.Peer, _ = strings.Cut(who, "->")
	for _, key := range []string{"conn ", "path "} {
		after, ok := strings.CutPrefix(msg, key)
		if !ok {
			continue
		}
		j := digits(after)
		n, err := strconv.ParseUint(after[:j], 10, 32)
		if j == 0 || err != nil {
			break
		}
		if key == "conn " {
			ev.Conn, ev.HasConn = uint32(n), true
		} else {
			ev.Path = int(n)
		}
		msg = strings.TrimPrefix(after[j:], ":")
		msg = strings.TrimPrefix(msg, " ")
	}
	ev.PSN = psnOf(msg)
	ev.Kind = transportKind(msg)
	return ev, true
}

// parseFabric reads "drop (queue-full) at LINK h0->h1 conn 1 path 2 psn 18
// WRITE RETX" and its kin.
func parseFabric(ev *TraceEvent, msg string) {
	ev.Fabric = true
	f := strings.Fields(msg)
	if len(f) == 0 {
		ev.Kind = "fabric"
		return
	}
	ev.Kind = f[0]
	for i := 1; i < len(f); i++ {
		switch {
		case f[i] == "at" && i+1 < len(f):
			ev.Link = f[i+1]
			i++
		case strings.Contains(f[i], "->") && ev.Host == "" && !strings.HasPrefix(f[i-1], "udp"):
			ev.Host, ev.Peer, _ = strings.Cut(f[i], "->")
		case i+1 < len(f) && (f[i] == "conn" || f[i] == "path" || f[i] == "psn" || f[i] == "cack"):
			n, err := strconv.ParseUint(f[i+1], 10, 32)
			if err != nil {
				continue
			}
			switch f[i] {
			case "conn":
				ev.Conn, ev.HasConn = uint32(n), true
			case "path":
				ev.Path = int(n)
			case "psn":
				ev.PSN = int64(n)
			case "cack":
				ev.PSN, ev.Ack = int64(n), true
			}
			i++
		case f[i] == "ACK":
			ev.Ack = true
		}
	}
}

// transportKind classifies a transport's decision for the ladder.
func transportKind(msg string) string {
	for _, k := range transportKinds {
		if strings.Contains(msg, k.text) {
			return k.kind
		}
	}
	return "note"
}

// transportKinds map the transports' trace phrases (metaroce, rocev2) to
// ladder kinds, most specific first.
var transportKinds = []struct{ text, kind string }{
	{"SACK hole", "sack-hole"},
	{"tail-loss probe", "probe"},
	{"retransmit", "retx"},
	{"go-back-N", "retx"},
	{"entropy", "entropy"},
	{"RTO", "rto"},
	{"ACK timeout", "rto"},
	{"recovered", "path-up"},
	{"failed", "path-down"},
	{"ECE", "ecn"},
	{"CE received", "ecn"},
	{"DCQCN", "ecn"},
	{"marked heavily", "ecn"},
	{"rate hint", "hint"},
	{"RNR", "rnr"},
	{"NAK", "nak"},
	{"established", "setup"},
	{"accepted", "setup"},
	{"closed", "close"},
}

// psnOf finds "psn N" in a message (-1 if none).
func psnOf(msg string) int64 {
	if n, ok := numberAfter(msg, "psn "); ok {
		return int64(n)
	}
	return -1
}

// numberAfter reads the decimal number after the first occurrence of key.
func numberAfter(s, key string) (uint64, bool) {
	i := strings.Index(s, key)
	if i < 0 {
		return 0, false
	}
	s = s[i+len(key):]
	j := digits(s)
	if j == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:j], 10, 32)
	return n, err == nil
}

// Involves reports whether ev belongs to connection c (one end's view):
// c's own decisions, its peer's decisions about it (when the peer's id is
// known), and fabric events on packets between the two ends addressed to
// either end's id.
func (c *ConnState) Involves(ev *TraceEvent) bool {
	if ev.Fabric {
		switch {
		case ev.Host == c.Host && ev.Peer == c.Peer:
			return !ev.HasConn || c.PeerID == 0 || ev.Conn == c.PeerID
		case ev.Host == c.Peer && ev.Peer == c.Host:
			return !ev.HasConn || ev.Conn == c.ID
		}
		return false
	}
	if ev.Host == c.Host {
		return ev.Conn == c.ID
	}
	return c.PeerID != 0 && ev.Host == c.Peer && ev.Conn == c.PeerID
}

// digits returns the length of s's leading run of decimal digits.
func digits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
