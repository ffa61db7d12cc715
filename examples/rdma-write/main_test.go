package main

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/labs"

	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
	"github.com/mrlab/mrlab/verbs"
)

// TestMain lets the test binary run as the example itself.
func TestMain(m *testing.M) {
	if os.Getenv("RDMA_WRITE_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func run(t *testing.T, endpoint string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RDMA_WRITE_MAIN=1", verbs.EndpointEnv+"="+endpoint)
	return cmd
}

// TestExample runs the server on h1 and the client on h0 of an
// in-process lab, over both transports: the client reports the data
// verified and both exit 0.
func TestExample(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	peer := lab.NICs[1].Addr()
	for i, tr := range []string{"metaroce", "rocev2"} {
		t.Run(tr, func(t *testing.T) {
			port := 18515 + i
			srv := run(t, lab.Endpoints[1], "--listen", "--port", strconv.Itoa(port))
			out, _ := srv.StdoutPipe()
			srv.Stderr = os.Stderr
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer srv.Process.Kill()
			sc := bufio.NewScanner(out)
			if !sc.Scan() || !strings.Contains(sc.Text(), "listening on port") {
				t.Fatalf("server said %q", sc.Text())
			}
			cli := run(t, lab.Endpoints[0], "--to", netip.AddrPortFrom(peer, uint16(port)).String(), "--size", "256KiB",
				"-n", "24", "--depth", "4", "--transport", tr)
			got, err := cli.CombinedOutput()
			if err != nil {
				t.Fatalf("client: %v\n%s", err, got)
			}
			t.Logf("client:\n%s", got)
			for _, want := range []string{"RDMA_Write BW Test", " 262144     24 ", "data verified: 24 messages, 6291456 bytes"} {
				if !strings.Contains(string(got), want) {
					t.Errorf("client output lacks %q:\n%s", want, got)
				}
			}
			rest := ""
			for sc.Scan() {
				rest += sc.Text() + "\n"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			waitCmd(ctx, t, srv)
			if !strings.Contains(rest, "24 messages of 262144 bytes") || !strings.Contains(rest, "data verified") {
				t.Errorf("server output: %s", rest)
			}
		})
	}
	lab.WaitNoClients(t, 5*time.Second)
}

func waitCmd(ctx context.Context, t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("server: %v", err)
		}
	case <-ctx.Done():
		t.Error("server did not exit")
	}
}

// TestCheckFindsCorruption: the server's check finds any changed byte,
// including in a message whose length is not a multiple of 8.
func TestCheckFindsCorruption(t *testing.T) {
	for _, n := range []int{1, 7, 8, 4096, 4099} {
		b := make([]byte, n)
		fill(b, 3, 9)
		if off := check(b, 3, 9); off != -1 {
			t.Fatalf("%d bytes: intact message fails at %d", n, off)
		}
		if check(b, 3, 10) == -1 || check(b, 4, 9) == -1 {
			t.Errorf("%d bytes: another message's pattern passes", n)
		}
		b[n-1] ^= 0x10
		if off := check(b, 3, 9); off != n-1 {
			t.Errorf("%d bytes: corrupted last byte found at %d", n, off)
		}
	}
}

// TestParseSizeMatchesLabs: the example reads sizes as mrlab does (one
// grammar: K, KB and KiB are 1024 everywhere).
func TestParseSizeMatchesLabs(t *testing.T) {
	for _, s := range []string{"4096", "64K", "64k", "64KB", "64kb", "64KiB", "1M", "1MB", "1MiB", "1mb", "1G", "1GiB", "9000B"} {
		got, err := parseSize(s)
		want, werr := labs.ParseSize(s)
		if err != nil || werr != nil || got != want {
			t.Errorf("%q: example reads %d (%v), mrlab %d (%v)", s, got, err, want, werr)
		}
	}
}
