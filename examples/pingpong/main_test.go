package main

import (
	"bufio"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
	"github.com/mrlab/mrlab/verbs"
)

// TestMain lets the test binary run as the example itself.
func TestMain(m *testing.M) {
	if os.Getenv("PINGPONG_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPingPong runs the server on h1 and the client on h0 of an
// in-process lab, with SEND/RECV and with WRITE_IMM.
func TestPingPong(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	for i, c := range []struct{ op, tr, title string }{
		{"send", "metaroce", "Send Latency Test"},
		{"write", "rocev2", "RDMA_Write Latency Test"},
	} {
		t.Run(c.op, func(t *testing.T) {
			port := strconv.Itoa(20000 + i)
			srv := exec.Command(os.Args[0], "--listen", "--port", port)
			srv.Env = append(os.Environ(), "PINGPONG_MAIN=1", verbs.EndpointEnv+"="+lab.Endpoints[1])
			out, _ := srv.StdoutPipe()
			srv.Stderr = os.Stderr
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer srv.Process.Kill()
			sc := bufio.NewScanner(out)
			if !sc.Scan() || !strings.Contains(sc.Text(), "listening") {
				t.Fatalf("server said %q", sc.Text())
			}
			to := netip.AddrPortFrom(lab.NICs[1].Addr(), uint16(20000+i)).String()
			cli := exec.Command(os.Args[0], "--to", to, "--size", "64", "-n", "50", "--op", c.op, "--transport", c.tr)
			cli.Env = append(os.Environ(), "PINGPONG_MAIN=1", verbs.EndpointEnv+"="+lab.Endpoints[0])
			got, err := cli.CombinedOutput()
			if err != nil {
				t.Fatalf("client: %v\n%s", err, got)
			}
			t.Logf("client:\n%s", got)
			for _, want := range []string{c.title, " 64     50 ", "data verified: 50 round trips"} {
				if !strings.Contains(string(got), want) {
					t.Errorf("client output lacks %q", want)
				}
			}
			done := make(chan error, 1)
			go func() { done <- srv.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("server: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("server did not exit")
			}
		})
	}
	lab.WaitNoClients(t, 5*time.Second)
}

// TestCClient builds examples/c/pingpong.c with cc and bounces messages
// off this program's server with it: the ABI as a C program speaks it.
func TestCClient(t *testing.T) {
	ccPath := testenv.RequireCommand(t, "cc")
	bin := filepath.Join(t.TempDir(), "pingpong-c")
	if out, err := exec.Command(ccPath, "-O2", "-Wall", "-Werror", "-std=c11", "-o", bin, "../c/pingpong.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	lab := uverbstest.Start(t, uverbstest.Options{})
	srv := exec.Command(os.Args[0], "--listen", "--port", "20100")
	srv.Env = append(os.Environ(), "PINGPONG_MAIN=1", verbs.EndpointEnv+"="+lab.Endpoints[1])
	out, _ := srv.StdoutPipe()
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.Contains(sc.Text(), "listening") {
		t.Fatalf("server said %q", sc.Text())
	}
	cli := exec.Command(bin, lab.NICs[1].Addr().String(), "20100", "100", "50")
	cli.Env = append(os.Environ(), verbs.EndpointEnv+"="+lab.Endpoints[0])
	got, err := cli.CombinedOutput()
	t.Logf("C client:\n%s", got)
	if err != nil || !strings.Contains(string(got), "data verified: 50 round trips") {
		t.Fatalf("C client: %v", err)
	}
	if err := srv.Wait(); err != nil {
		t.Errorf("server: %v", err)
	}
	lab.WaitNoClients(t, 5*time.Second)
}
