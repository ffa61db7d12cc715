package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/labs/live/livetest"
	"github.com/mrlab/mrlab/labs/uverbs"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/verbs"
)

// TestMain lets the test binary double as a verbs client that opens
// another host's endpoint from its own namespace (TestLiveVerbs).
func TestMain(m *testing.M) {
	if ns := os.Getenv("MRLAB_TEST_FOREIGN_NS"); ns != "" {
		os.Exit(foreignClient(ns))
	}
	if os.Getenv(runMainEnv) != "" {
		code := run(append([]string{"mrlab"}, os.Args[1:]...), os.Stdout, os.Stderr)
		writeHWM()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// foreignClient switches one thread into the namespace ns and opens the
// verbs endpoint there, while the process stays in its own host. It
// prints what happened and exits 0 only if the endpoint refused it.
func foreignClient(ns string) int {
	code := make(chan int)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with its goroutine
		h, err := netns.GetFromPath(ns)
		if err == nil {
			err = netns.Set(h)
		}
		if err != nil {
			fmt.Println("setns:", err)
			code <- 2
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dev, err := verbs.Open(ctx)
		if err == nil {
			dev.Close()
			fmt.Println("accepted")
			code <- 1
			return
		}
		fmt.Println("open:", err)
		if errors.Is(err, verbs.ErrNotPermitted) {
			code <- 0
			return
		}
		code <- 1
	}()
	return <-code
}

// TestLiveVerbs is the verbs endpoint as users drive it, as root, on the
// default lab: rdma-write server on h4 and client on h0 (64 MiB of WRITEs,
// every byte checked), a SEND/RECV ping-pong, a process in h2 refused by
// h0's endpoint, a client killed -9 mid-transfer (its peer fails, the lab
// releases everything and keeps serving), and the traffic visible in the
// trace and a capture. Status lists the clients while they run and none
// after.
func TestLiveVerbs(t *testing.T) {
	testenv.RequireNamespaces(t)
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../../examples/rdma-write", "../../examples/pingpong").CombinedOutput(); err != nil {
		t.Fatalf("building the examples: %v\n%s", err, out)
	}
	src, err := os.ReadFile("../../labs/examples/leafspine.yaml")
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("vb%d", os.Getpid()%100000)
	labFile := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(labFile, bytes.Replace(src, []byte("name: leafspine"), []byte("name: "+name), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	lab, err := labs.Load(labFile)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := live.NewLabEngine(lab, live.EngineConfig{MaxRate: live.DefaultMaxRate})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l, st := livetest.Up(t, name, eng, live.Options{RunDir: dir})
	ctl := live.NewClient(name, st.Socket)
	h4, _ := st.Host("h4")
	h4addr := netip.MustParseAddr(h4.Addr)
	fds0, maps0 := labResources(t)

	// start runs a program in a host and returns it with its stdout.
	start := func(host string, args ...string) (*exec.Cmd, *bufio.Scanner, *bytes.Buffer) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, args[0]), args[1:]...)
		out, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := live.Exec(dir, name, host, cmd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, bufio.NewScanner(out), &stderr
	}
	listening := func(sc *bufio.Scanner) {
		t.Helper()
		if !sc.Scan() || !strings.Contains(sc.Text(), "listening on port") {
			t.Fatalf("server said %q", sc.Text())
		}
	}
	rest := func(sc *bufio.Scanner) string {
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		return b.String()
	}
	run := func(host string, args ...string) string {
		t.Helper()
		cmd, sc, stderr := start(host, args...)
		out := rest(sc)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s on %s: %v\n%s%s", args[0], host, err, out, stderr)
		}
		return out
	}

	t.Run("rdma-write 64 MiB", func(t *testing.T) {
		srv, sc, serr := start("h4", "rdma-write", "--listen")
		listening(sc)
		// Watch h0's trace while it runs.
		tctx, tcancel := context.WithCancel(context.Background())
		defer tcancel()
		trace, err := ctl.Trace(tctx, "host=h0", "")
		if err != nil {
			t.Fatal(err)
		}
		traced := make(chan string, 1)
		go func() { b, _ := io.ReadAll(trace); traced <- string(b) }()
		out := run("h0", "rdma-write", "--to", h4addr.String(), "--size", "1MiB", "-n", "64")
		t.Logf("client:\n%s", out)
		if !strings.Contains(out, "data verified: 64 messages, 67108864 bytes") {
			t.Errorf("client output:\n%s", out)
		}
		if s := rest(sc); !strings.Contains(s, "data verified") || srv.Wait() != nil {
			t.Errorf("server: %s%s", s, serr)
		}
		time.Sleep(100 * time.Millisecond)
		tcancel()
		tr := <-traced
		if !strings.Contains(tr, "verbs: pid") || !strings.Contains(tr, "connecting to "+h4addr.String()+":18515 over metaroce") {
			t.Errorf("h0's trace lacks the program's connection:\n%.3000s", tr)
		}
	})

	t.Run("ping-pong", func(t *testing.T) {
		srv, sc, serr := start("h4", "pingpong", "--listen")
		listening(sc)
		out := run("h0", "pingpong", "--to", h4addr.String(), "--size", "64", "-n", "200")
		t.Logf("client:\n%s", out)
		if !strings.Contains(out, "data verified: 200 round trips") {
			t.Errorf("client output:\n%s", out)
		}
		if s := rest(sc); srv.Wait() != nil {
			t.Errorf("server: %s%s", s, serr)
		}
	})

	t.Run("h2 refused by h0's endpoint", func(t *testing.T) {
		h0, _ := st.Host("h0")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "MRLAB_TEST_FOREIGN_NS="+filepath.Join(hostns.NetnsDir, h0.Namespace))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := live.Exec(dir, name, "h2", cmd); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "not in host h0's network namespace") {
			t.Errorf("a process in h2 opening h0's endpoint: %v\n%s", err, out.String())
		}
	})

	t.Run("client killed mid-transfer", func(t *testing.T) {
		srv, sc, serr := start("h4", "rdma-write", "--listen", "--port", "18600")
		listening(sc)
		cli, _, _ := start("h0", "rdma-write", "--to", h4addr.String()+":18600", "--size", "1MiB", "-n", "100000")
		// Wait until it moves data, then kill it.
		deadline := time.Now().Add(20 * time.Second)
		for {
			s, err := ctl.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if v := hostVerbs(s, "h0"); len(v) == 1 && v[0].Connected == 1 && v[0].Completed > 8 {
				if w := hostVerbs(s, "h4"); len(w) != 1 || w[0].MRBytes == 0 {
					t.Errorf("status lists h4's clients as %+v", w)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the client never got going: %+v", s.Hosts)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := cli.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cli.Wait()
		// The peer sees its connection fail and exits with the error.
		werr := make(chan error, 1)
		go func() { rest(sc); werr <- srv.Wait() }()
		select {
		case err := <-werr:
			if err == nil || !strings.Contains(serr.String(), "completed with") {
				t.Errorf("server after its client was killed: exit %v, stderr %q", err, serr.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the server did not notice its client died")
		}
	})

	t.Run("nothing left, lab healthy", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, err := ctl.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, h := range s.Hosts {
				n += len(h.Verbs)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("verbs clients left: %+v", s.Hosts)
			}
			time.Sleep(50 * time.Millisecond)
		}
		var conns int
		l.Pacer().Do(context.Background(), func(sim.Time) {
			for i := range st.Hosts {
				conns += len(l.Engine().(live.VerbsHost).NIC(i).Conns())
			}
		})
		if conns != 0 {
			t.Errorf("%d connections left on the NICs", conns)
		}
		if fds, maps := labResources(t); fds > fds0 || maps > maps0 {
			t.Errorf("the lab holds %d descriptors (%d before) and %d verbs mappings (%d before)", fds, fds0, maps, maps0)
		}
		// A capture of h0 during a short run shows the program's packets.
		srv, sc, _ := start("h4", "rdma-write", "--listen", "--port", "18601")
		listening(sc)
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		pcap, err := ctl.Capture(cctx, "h0", "port=4791", 50)
		if err != nil {
			t.Fatal(err)
		}
		out := run("h0", "rdma-write", "--to", h4addr.String()+":18601", "--size", "64KiB", "-n", "16", "--transport", "rocev2")
		if !strings.Contains(out, "data verified") {
			t.Errorf("after the kill, a new transfer: %s", out)
		}
		srv.Wait()
		_, pkts, err := capture.ReadAll(pcap)
		pcap.Close()
		rocev2 := 0
		for _, p := range pkts {
			if len(p.Data) >= 24 && p.Data[9] == 17 && (uint16(p.Data[22])<<8|uint16(p.Data[23])) == 4791 {
				rocev2++
			}
		}
		if rocev2 == 0 {
			t.Errorf("capture of h0 (%v): %d packets, none RoCEv2", err, len(pkts))
		}
	})
}

func hostVerbs(s live.Status, host string) []uverbs.ClientStatus {
	for _, h := range s.Hosts {
		if h.Name == host {
			return h.Verbs
		}
	}
	return nil
}

// labResources counts this process's verbs descriptors (memfds and
// eventfds) and its mappings of verbs shared memory (the lab runs in this
// process).
func labResources(t *testing.T) (fds, maps int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		link, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if strings.Contains(link, "mrlab-verbs") || strings.Contains(link, "eventfd") {
			fds++
		}
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return fds, strings.Count(string(b), "mrlab-verbs")
}
