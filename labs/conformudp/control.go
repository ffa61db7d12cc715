package conformudp

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// controlClient is the tester's end of a control channel.
type controlClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialControl(local netip.Addr, addr string) (*controlClient, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if local.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("conformance control channel %s: %w", addr, err)
	}
	return &controlClient{conn: c, r: bufio.NewReader(c)}, nil
}

// call sends one request and returns the answer's value.
func (c *controlClient) call(req string) (string, error) {
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c.conn, "%s\n", req); err != nil {
		return "", fmt.Errorf("control %q: %w", req, err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("control %q: reading the answer: %w", req, err)
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case line == "ok":
		return "", nil
	case strings.HasPrefix(line, "ok "):
		return line[3:], nil
	case strings.HasPrefix(line, "err "):
		return "", fmt.Errorf("IUT: %s", line[4:])
	}
	return "", fmt.Errorf("control %q: malformed answer %q", req, line)
}

func (c *controlClient) close() error { return c.conn.Close() }
