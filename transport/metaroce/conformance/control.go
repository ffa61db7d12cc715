package conformance

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The control channel: how the tester drives the IUT's application side
// over the network (docs/conformance.md, "Control channel"). One TCP
// connection per test; each request is one line, each answer one line,
// "ok[ VALUE]" or "err MESSAGE":
//
//	reset [dilation=N] [KEY=VALUE...]  fresh IUT with the script's "iut:" settings
//	do VERB [KEY=VALUE...]             dial, write, write_imm, send, send_imm, read, recv, close
//	completions                        ok JSON array of completions since the last call
//	mem KEY ADDR LEN                   ok HEX
//	counter NAME                       ok DECIMAL
//	state                              ok none|connecting|established|closed|error
//
// Numbers are decimal or 0x-hex.

// ControlPort is the control channel's default TCP port.
const ControlPort = 4799

// FormatArgs writes KEY=VALUE pairs in a stable order.
func FormatArgs(args map[string]uint64) string {
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, args[k])
	}
	return b.String()
}

// ParseArgs reads KEY=VALUE words.
func ParseArgs(words []string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return nil, fmt.Errorf("argument %q: want KEY=VALUE", w)
		}
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return nil, fmt.Errorf("argument %s: %q is not a number", k, v)
		}
		out[k] = n
	}
	return out, nil
}

// ServeControl answers one control request against an IUT. reset is the
// caller's (it replaces the IUT).
func ServeControl(iut IUT, words []string) (string, error) {
	switch words[0] {
	case "do":
		if len(words) < 2 {
			return "", fmt.Errorf("do needs a verb")
		}
		args, err := ParseArgs(words[2:])
		if err != nil {
			return "", err
		}
		return "", iut.Do(words[1], args)
	case "completions":
		c, err := iut.Completions()
		if err != nil {
			return "", err
		}
		if c == nil {
			c = []Completion{}
		}
		b, err := json.Marshal(c)
		return string(b), err
	case "mem":
		if len(words) != 4 {
			return "", fmt.Errorf("mem KEY ADDR LEN")
		}
		var n [3]uint64
		for i := range n {
			x, err := strconv.ParseUint(words[i+1], 0, 64)
			if err != nil {
				return "", fmt.Errorf("mem: %q is not a number", words[i+1])
			}
			n[i] = x
		}
		if n[2] > 1<<20 {
			return "", fmt.Errorf("mem: at most 1 MiB at a time")
		}
		b, err := iut.Mem(uint32(n[0]), n[1], int(n[2]))
		return hex.EncodeToString(b), err
	case "counter":
		if len(words) != 2 {
			return "", fmt.Errorf("counter NAME")
		}
		v, err := iut.Counter(words[1])
		return strconv.FormatUint(v, 10), err
	case "state":
		return iut.State()
	}
	return "", fmt.Errorf("unknown request %q", words[0])
}
