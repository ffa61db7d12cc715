package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/ibverbs"
	"github.com/mrlab/mrlab/internal/testenv"
)

// TestIbverbsPrograms runs Debian's unmodified ibverbs binaries
// (ibverbs-utils, perftest) across a live mini lab through
// `mrlab exec --ibverbs`: h0 (leaf 0) to h2 (leaf 1), so traffic crosses
// the spines of both planes. Every run must exit 0 and print its normal
// output; ibv_rc_pingpong's --chk checks every byte it bounces.
func TestIbverbsPrograms(t *testing.T) {
	testenv.RequireNamespaces(t)
	testenv.RequireCommand(t, "cc")
	testenv.RequireFile(t, ibverbs.Header, "libibverbs-dev")
	for _, c := range []string{"ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "ib_write_bw", "ib_read_bw", "ib_send_bw",
		"ib_write_lat", "ib_read_lat", "ib_send_lat"} {
		testenv.RequireCommand(t, c)
	}
	t.Setenv("MRLAB_IBVERBS_CACHE", t.TempDir())
	lb := newCLILab(t, "ibv")
	if code, out := lb.sh(t, "up", lb.file); code != 0 {
		t.Fatalf("up: %d\n%s", code, out)
	}
	on := func(host string, argv ...string) []string {
		return append([]string{"exec", "--ibverbs", "--lab", lb.name, host, "--"}, argv...)
	}

	t.Run("ibv_devices", func(t *testing.T) {
		code, out := lb.sh(t, on("h0", "ibv_devices")...)
		// GUIDs: 02:<transport>:ff:fe and h0's address 198.18.0.1.
		if code != 0 || !regexp.MustCompile(`metaroce0\s+0201fffec6120001`).MatchString(out) ||
			!regexp.MustCompile(`rocev2_0\s+0202fffec6120001`).MatchString(out) {
			t.Errorf("ibv_devices: code %d\n%s", code, out)
		}
	})
	t.Run("ibv_devinfo", func(t *testing.T) {
		code, out := lb.sh(t, on("h2", "ibv_devinfo", "-v")...)
		for _, want := range []string{"hca_id:\tmetaroce0", "hca_id:\trocev2_0", "state:\t\t\tPORT_ACTIVE (4)",
			"link_layer:\t\tEthernet", "GID[  0]:\t\t::ffff:198.18.1.1, RoCE v2", "max_qp:\t\t\t\t256", "max_sge:\t\t\t4"} {
			if !strings.Contains(out, want) {
				t.Errorf("ibv_devinfo -v lacks %q", want)
			}
		}
		if code != 0 || t.Failed() {
			t.Errorf("ibv_devinfo -v: code %d\n%s", code, out)
		}
	})

	// pair runs a server on h2 and its client on h0, which retries while
	// the server is not listening yet, and returns both outputs.
	once := func(t *testing.T, argv ...string) (int, string, string) {
		srv := make(chan string, 1)
		go func() {
			code, out := lb.sh(t, on("h2", argv...)...)
			srv <- fmt.Sprintf("exit %d\n%s", code, out)
		}()
		var code int
		var out string
		for i := 0; i < 100; i++ {
			time.Sleep(200 * time.Millisecond)
			code, out = lb.sh(t, on("h0", append(argv, "198.18.1.1")...)...)
			if !strings.Contains(out, "Couldn't connect") && !strings.Contains(out, "Unable to open file descriptor for socket connection") {
				break
			}
		}
		return code, out, <-srv
	}
	pair := func(t *testing.T, argv ...string) (string, string) {
		t.Helper()
		code, out, s := once(t, argv...)
		// perftest times its run in CPU cycles and calibrates the
		// cycle rate against gettimeofday before reporting; on a busy
		// machine the fit can fail ("Correlation coefficient r^2 ...
		// < 0.9", "Can't produce a report": perftest's get_clock.c),
		// which says nothing of the lab. Run such a pair once more.
		if strings.Contains(out, "Can't produce a report") {
			t.Logf("%v: perftest could not calibrate its clock; running the pair again\n%s", argv, out)
			code, out, s = once(t, argv...)
		}
		if code != 0 || !strings.HasPrefix(s, "exit 0\n") {
			t.Errorf("%v: client exit %d\n%s\nserver %s", argv, code, out, s)
		}
		return out, s
	}
	// Sizes up to 1 MiB; -e sleeps on completion channels, -N posts with
	// ibv_wr_* (struct ibv_qp_ex), no -g addresses the peer by LID.
	for _, args := range [][]string{{"-g", "0", "-s", "1"}, {"-g", "0", "-s", "4096"}, {"-g", "0", "-s", "65536"},
		{"-g", "0", "-s", "1048576"}, {"-g", "0", "-e", "-s", "8192"}, {"-g", "0", "-N", "-s", "8192"}, {"-s", "100"}} {
		t.Run("ibv_rc_pingpong "+strings.Join(args, " "), func(t *testing.T) {
			cli, srv := pair(t, append([]string{"ibv_rc_pingpong", "--chk", "-n", "20"}, args...)...)
			for _, out := range []string{cli, srv} {
				if !strings.Contains(out, "20 iters in") {
					t.Errorf("ibv_rc_pingpong %v: no result line\n%s", args, out)
				}
			}
		})
	}
	// The library's own checks (ibverbs/ctest): state errors, bad keys,
	// posting in ERROR, refused verbs, rnr_retry against a receive posted
	// late; built against rdma-core's libibverbs, on both devices.
	selftest := filepath.Join(t.TempDir(), "selftest")
	if out, err := exec.Command("cc", "-O2", "-Wall", "-o", selftest, "../../ibverbs/ctest/selftest.c", "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("building the selftest: %v\n%s", err, out)
	}
	for _, dev := range []string{"metaroce0", "rocev2_0"} {
		t.Run("selftest "+dev, func(t *testing.T) {
			cli, srv := pair(t, selftest, "-d", dev)
			for _, out := range []string{cli, srv} {
				if strings.Contains(out, "FAIL") || !strings.Contains(out, "ok INIT to RTR to RTS") {
					t.Errorf("selftest:\n%s", out)
				}
			}
			if n := strings.Count(cli, "\nok "); n < 38 {
				t.Errorf("selftest client passed %d checks, want 38 or more\n%s", n, cli)
			}
			if !strings.Contains(srv, "ok receive posted 1 s late gets the SEND") {
				t.Errorf("selftest server did not check the late receive\n%s", srv)
			}
		})
	}
	bw := regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)
	lat := regexp.MustCompile(`(?m)^\s*2\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+`)
	// Duration mode (-D) prints iterations, t_avg and tps.
	latD := regexp.MustCompile(`(?m)^\s*2\s+[1-9]\d*\s+[\d.]+\s+[\d.]+\s*$`)
	for _, tc := range []struct {
		argv []string
		want *regexp.Regexp
	}{
		{[]string{"ib_write_bw"}, bw},
		{[]string{"ib_read_bw"}, bw},
		{[]string{"ib_send_bw"}, bw},
		{[]string{"ib_send_bw", "-e", "-n", "500"}, bw},
		{[]string{"ib_write_bw", "-d", "rocev2_0", "-n", "1000"}, bw},
		{[]string{"ib_write_bw", "-q", "32", "-n", "200"}, bw}, // 32 QPs: past the old limit of 16
		{[]string{"ib_write_bw", "-s", "1048576", "-n", "1000"}, bw},
		{[]string{"ib_write_bw", "-D", "3"}, bw},
		{[]string{"ib_read_bw", "-D", "3"}, bw},
		{[]string{"ib_write_lat", "-n", "200"}, lat},
		{[]string{"ib_read_lat", "-n", "200"}, lat},
		{[]string{"ib_send_lat", "-n", "200"}, lat},
		{[]string{"ib_send_lat", "-D", "3"}, latD},
	} {
		t.Run(strings.Join(tc.argv, " "), func(t *testing.T) {
			cli, _ := pair(t, tc.argv...)
			m := tc.want.FindStringSubmatch(cli)
			if m == nil || !strings.Contains(cli, "#bytes") {
				t.Errorf("%v printed no result table\n%s", tc.argv, cli)
			} else if tc.want == bw && (m[2] == "0" || m[4] == "0.00") {
				t.Errorf("%v moved nothing: %s iterations, average %s MB/s\n%s", tc.argv, m[2], m[4], cli)
			}
		})
	}

	// No system call per work request in steady state: ib_write_bw's
	// client under strace -f -c, at two run lengths; the extra system
	// calls of the longer run, per extra work request, are the data
	// path's (doorbells when the lab's loop sleeps). Measured 0.04 at
	// load ~20 (161 more calls for 4,000 more requests, all doorbell
	// writes); the bound leaves a margin for a lab that sleeps more.
	t.Run("syscalls per work request", func(t *testing.T) {
		testenv.RequireCommand(t, "strace")
		total := regexp.MustCompile(`(?m)^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?total\s*$`)
		dir := t.TempDir()
		calls := func(n int) int {
			out := filepath.Join(dir, fmt.Sprintf("strace-%d", n))
			srv := make(chan int, 1)
			argv := []string{"ib_write_bw", "-n", fmt.Sprint(n)}
			go func() {
				code, _ := lb.sh(t, on("h2", argv...)...)
				srv <- code
			}()
			var code int
			var cli string
			for i := 0; i < 100; i++ {
				time.Sleep(200 * time.Millisecond)
				code, cli = lb.sh(t, on("h0", append([]string{"strace", "-f", "-c", "-o", out}, append(argv, "198.18.1.1")...)...)...)
				if !strings.Contains(cli, "Couldn't connect") && !strings.Contains(cli, "Unable to open file descriptor for socket connection") {
					break
				}
			}
			if c := <-srv; code != 0 || c != 0 {
				t.Fatalf("ib_write_bw -n %d under strace: client exit %d, server %d\n%s", n, code, c, cli)
			}
			b, err := os.ReadFile(out)
			m := total.FindSubmatch(b)
			if err != nil || m == nil {
				t.Fatalf("strace -c output: %v\n%s", err, b)
			}
			var k int
			fmt.Sscan(string(m[1]), &k)
			return k
		}
		// A post to a lab whose loop sleeps rings a doorbell, and a lab
		// descheduled on a shared machine (CI runs packages side by
		// side) sleeps more: one run measured 0.72 in CI. A library
		// that makes a system call per request fails every attempt.
		var per float64
		for attempt := range 3 {
			short, long := calls(500), calls(4500)
			per = float64(long-short) / 4000
			load, _ := os.ReadFile("/proc/loadavg")
			t.Logf("attempt %d (load %s): system calls: %d for 500 work requests, %d for 4500: %.3f per extra request",
				attempt+1, strings.TrimSpace(string(load)), short, long, per)
			if per <= 0.25 {
				break
			}
		}
		if per > 0.25 {
			t.Errorf("%.3f system calls per work request in each of 3 attempts, want at most 0.25 (no system call per request in steady state)", per)
		}
	})

	// Bandwidth beside mrlab perf's on the same lab and path, one after
	// the other: logged, not asserted (wall-clock rates on a shared
	// machine). Both print MiB/s (perftest's "MB" is 2^20 bytes).
	t.Run("bandwidth vs mrlab perf", func(t *testing.T) {
		// mrlab perf checks every byte (fill and check in Go, 2 x 328 MB
		// here) and polls by spinning with runtime.Gosched; ib_write_bw
		// does neither. Measured at load 22-25: perf 49 MiB/s, with
		// --verify=false 166-177, with -e 95-97, with both 207-223,
		// ib_write_bw 225: the gap is the data check and the spinning
		// Go client's CPU starvation, not the data path. Both variants
		// are logged for a quiet box.
		avg := regexp.MustCompile(`(?m)^\s*65536\s+5000\s+[\d.]+\s+([\d.]+)`)
		perf := func(args ...string) (float64, string) {
			code, out := lb.sh(t, append([]string{"perf", "--lab", lb.name, "--from", "h0", "--to", "h2", "--allow-lag"}, args...)...)
			m := avg.FindStringSubmatch(out)
			if code != 0 || m == nil {
				t.Fatalf("mrlab perf %v: code %d\n%s", args, code, out)
			}
			var v float64
			fmt.Sscan(m[1], &v)
			return v, strings.SplitN(out, "\n", 2)[0]
		}
		a, first := perf()
		lean, leanFirst := perf("--verify=false", "-e")
		cli, _ := pair(t, "ib_write_bw")
		n := avg.FindStringSubmatch(cli)
		if n == nil {
			t.Fatalf("ib_write_bw printed no result\n%s", cli)
		}
		var b float64
		fmt.Sscan(n[1], &b)
		load, _ := os.ReadFile("/proc/loadavg")
		t.Logf("write_bw 64 KiB x 5000 h0->h2 (load %s): ib_write_bw on libmrlab-ibverbs %.2f MiB/s; mrlab perf %.2f (ratio %.2f), "+
			"mrlab perf --verify=false -e %.2f (ratio %.2f); perf's first lines: %s | %s",
			strings.TrimSpace(string(load)), b, a, b/a, lean, b/lean, first, leanFirst)
	})

	// Port state follows the host's links (ibverbs/src/port.c): with one
	// of h0's two plane links down the port stays ACTIVE; with both down
	// it is DOWN and IBV_EVENT_PORT_ERR arrives; a link back brings
	// IBV_EVENT_PORT_ACTIVE. Last, as it takes h0's links down.
	t.Run("port state follows links", func(t *testing.T) {
		dir := t.TempDir()
		bin, ready := filepath.Join(dir, "portstate"), filepath.Join(dir, "ready")
		if out, err := exec.Command("cc", "-O2", "-Wall", "-o", bin, "../../ibverbs/ctest/portstate.c", "-libverbs").CombinedOutput(); err != nil {
			t.Fatalf("building portstate: %v\n%s", err, out)
		}
		fault := func(link, how string) {
			t.Helper()
			if code, out := lb.sh(t, "fault", "--lab", lb.name, "link", link, how); code != 0 {
				t.Fatalf("fault link %s %s: %d\n%s", link, how, code, out)
			}
		}
		done := make(chan string, 1)
		go func() {
			code, out := lb.sh(t, on("h0", bin, "2", ready)...)
			done <- fmt.Sprintf("exit %d\n%s", code, out)
		}()
		for i := 0; i < 600; i++ { // 60 s: mrlab exec builds nothing new, but the box is loaded
			if _, err := os.Stat(ready); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		fault("h0-p0", "down")
		time.Sleep(500 * time.Millisecond) // no event may come of it
		fault("h0-p1", "down")
		time.Sleep(500 * time.Millisecond)
		code, devinfo := lb.sh(t, on("h0", "ibv_devinfo")...)
		fault("h0-p1", "up")
		fault("h0-p0", "up")
		out := <-done
		want := "exit 0\nstate ACTIVE\nevent PORT_ERR port 1 state DOWN\nevent PORT_ACTIVE port 1 state ACTIVE\n"
		if !strings.HasPrefix(out, want) {
			t.Errorf("portstate printed\n%s\nwant it to start\n%s", out, want)
		}
		if code != 0 || !strings.Contains(devinfo, "PORT_DOWN (1)") {
			t.Errorf("ibv_devinfo with h0's links down: code %d, no PORT_DOWN\n%s", code, devinfo)
		}
	})
}
