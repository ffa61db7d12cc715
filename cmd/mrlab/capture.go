package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/capture"
	"github.com/mrlab/mrlab/dissector"
	"github.com/mrlab/mrlab/labs/live"
)

// `mrlab capture` streams a pcapng capture from a running live lab: it asks
// the lab's control socket for GET /capture (served by capture.Live) and
// copies the stream to a file or stdout, whole pcapng blocks at a time, so
// that an interrupted capture is still a valid file.

func init() { register(newCaptureCommand) }

func newCaptureCommand() *cli.Command {
	return &cli.Command{
		Name:      "capture",
		Usage:     "capture packets at a host, switch or link of a running live lab, as pcapng",
		ArgsUsage: "HOST[:PORT]|SWITCH[:PORT]|LINK[:AtoB|:BtoA]",
		Description: "Streams what crosses the capture point, with lab-time timestamps and the fabric's\n" +
			"drop/mark/corruption annotations as packet comments, until interrupted:\n\n" +
			"   mrlab capture h0 -w - | wireshark -X lua_script:dissector/metaroce.lua -k -i -\n" +
			"   mrlab capture p0-leaf0-spine1 -w spine.pcapng --filter conn=4,path=9 -c 1000\n\n" +
			"Filter terms: host=NAME|ADDR, conn=ID (destination connection id or QP), path=ID,\n" +
			"port=UDP-PORT; repeat a key to widen it. --dissector prints the MetaRoCE Wireshark\n" +
			"dissector (install it as ~/.local/lib/wireshark/plugins/metaroce.lua).",
		Flags: []cli.Flag{runDirFlag(), labFlag(),
			&cli.StringFlag{Name: "write", Aliases: []string{"w"}, Usage: "write the capture to `FILE` (- for stdout)"},
			&cli.StringFlag{Name: "filter", Aliases: []string{"f"}, Usage: "keep only matching packets (host=, conn=, path=, port=)"},
			&cli.IntFlag{Name: "count", Aliases: []string{"c"}, Usage: "stop after this many packets"},
			&cli.DurationFlag{Name: "duration", Aliases: []string{"d"}, Usage: "stop after this long (wall clock)"},
			&cli.BoolFlag{Name: "dissector", Usage: "print the MetaRoCE Wireshark Lua dissector and exit"},
		},
		Action: captureAction,
	}
}

func captureAction(c *cli.Context) error {
	args, err := cmdArgs(c)
	if err != nil {
		return err
	}
	if c.Bool("dissector") {
		_, err := c.App.Writer.Write(dissector.Lua)
		return err
	}
	if len(args) != 1 {
		return usagef("capture: want one capture point (a host, switch or link), got %d arguments", len(args))
	}
	point := args[0]
	if _, err := capture.ParseSpec(point); err != nil {
		return usageError{fmt.Errorf("capture: %w", err)}
	}
	if aliasString(c, "filter") != "" {
		// Names are resolved by the lab; check the syntax here.
		anyHost := func(string) (netip.Addr, bool) { return netip.IPv4Unspecified(), true }
		if _, err := capture.ParseFilter(aliasString(c, "filter"), anyHost); err != nil {
			return usageError{fmt.Errorf("capture: --filter: %w", err)}
		}
	}
	if aliasInt(c, "count") < 0 {
		return usagef("capture: --count %d: want a number of packets", aliasInt(c, "count"))
	}
	dest := aliasString(c, "write")
	if dest == "" {
		return usagef("capture: say where to write the capture: -w FILE, or -w - for stdout")
	}
	name, err := runningLab(c, c.String("lab"))
	if err != nil {
		return err
	}
	st, err := live.ReadState(c.String("run-dir"), name)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if d := aliasDuration(c, "duration"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	q := url.Values{"point": {point}}
	if f := aliasString(c, "filter"); f != "" {
		q.Set("filter", f)
	}
	if n := aliasInt(c, "count"); n > 0 {
		q.Set("count", strconv.Itoa(n))
	}
	body, err := openCapture(ctx, name, st.Socket, q)
	if err != nil {
		return err
	}
	defer body.Close()

	var out io.Writer = c.App.Writer
	var file *os.File
	if dest != "-" {
		if file, err = os.Create(dest); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		out = file
	}
	n, copyErr := copyBlocks(out, body)
	if file != nil {
		if err := file.Close(); err != nil && copyErr == nil {
			copyErr = fmt.Errorf("capture: %w", err)
		}
	}
	// The end of a capture the user asked to end is not an error.
	if copyErr != nil && ctx.Err() == nil {
		return copyErr
	}
	if dest != "-" {
		fmt.Fprintf(c.App.ErrWriter, "capture %s of lab %s: %d packets to %s\n", point, name, n, dest)
	}
	return nil
}

// openCapture asks the lab for a capture stream.
func openCapture(ctx context.Context, lab, socket string, q url.Values) (io.ReadCloser, error) {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://lab/capture?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lab %s: control socket %s: %w", lab, socket, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(msg))
	var ae struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(msg, &ae) == nil && ae.Error != "" {
		text = ae.Error
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, fmt.Errorf("lab %s does not serve captures (its control socket has no /capture)", lab)
	case resp.StatusCode == http.StatusBadRequest:
		return nil, usageError{fmt.Errorf("lab %s: %s", lab, text)}
	}
	return nil, fmt.Errorf("lab %s: capture: %s (HTTP %d)", lab, text, resp.StatusCode)
}

// copyBlocks copies a pcapng stream from r to w one whole block at a time
// and returns the number of packet blocks. A stream cut in the middle of a
// block (the capture was interrupted) leaves w holding only whole blocks.
func copyBlocks(w io.Writer, r io.Reader) (int, error) {
	var hdr [8]byte
	var buf []byte
	packets := 0
	var order binary.ByteOrder = binary.LittleEndian
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return packets, nil
			}
			return packets, fmt.Errorf("reading capture stream: %w", err)
		}
		typ := order.Uint32(hdr[:4])
		if typ == 0x0A0D0D0A {
			// A section header: its byte-order magic follows.
			var m [4]byte
			if _, err := io.ReadFull(r, m[:]); err != nil {
				return packets, fmt.Errorf("reading capture stream: %w", err)
			}
			if binary.BigEndian.Uint32(m[:]) == 0x1A2B3C4D {
				order = binary.BigEndian
			} else {
				order = binary.LittleEndian
			}
			buf = append(append(buf[:0], hdr[:]...), m[:]...)
		} else {
			buf = append(buf[:0], hdr[:]...)
		}
		n := int(order.Uint32(hdr[4:8]))
		if n < len(buf) || n%4 != 0 || n > 1<<24 {
			return packets, fmt.Errorf("reading capture stream: bad block length %d", n)
		}
		start := len(buf)
		buf = append(buf, make([]byte, n-start)...)
		if _, err := io.ReadFull(r, buf[start:]); err != nil {
			return packets, fmt.Errorf("reading capture stream: %w", err)
		}
		if _, err := w.Write(buf); err != nil {
			return packets, fmt.Errorf("writing capture: %w", err)
		}
		if typ == 6 { // enhanced packet block
			packets++
		}
	}
}

// Flags set by cmdArgs (written after the capture point) land on the name
// they were typed with, and urfave/cli keeps an alias's value apart from
// its flag's until it normalizes them itself; these read whichever name
// was set.

func aliasNames(c *cli.Context, name string) []string {
	if f := findFlag(c.Command.Flags, name); f != nil {
		return f.Names()
	}
	return []string{name}
}

func aliasString(c *cli.Context, name string) string {
	for _, n := range aliasNames(c, name) {
		if v := c.String(n); v != "" {
			return v
		}
	}
	return ""
}

func aliasInt(c *cli.Context, name string) int {
	for _, n := range aliasNames(c, name) {
		if v := c.Int(n); v != 0 {
			return v
		}
	}
	return 0
}

func aliasDuration(c *cli.Context, name string) time.Duration {
	for _, n := range aliasNames(c, name) {
		if v := c.Duration(n); v != 0 {
			return v
		}
	}
	return 0
}
