package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
)

// slurm is a single-node Slurm cluster of the test's own: munged,
// slurmctld and slurmd on private ports, with state, logs and sockets in
// a temporary directory, started and stopped by their pids.
type slurm struct {
	dir   string
	env   []string // the environment for Slurm's clients (SLURM_CONF)
	procs []*exec.Cmd
}

// freePort returns a TCP port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startSlurm(t *testing.T) *slurm {
	t.Helper()
	munged := testenv.RequireCommand(t, "munged")
	ctld := testenv.RequireCommand(t, "slurmctld")
	slurmd := testenv.RequireCommand(t, "slurmd")
	for _, c := range []string{"sbatch", "squeue", "scancel"} {
		testenv.RequireCommand(t, c)
	}
	s := &slurm{dir: t.TempDir()}
	for _, d := range []string{"state", "spool", "log"} {
		if err := os.Mkdir(filepath.Join(s.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	rand.Read(key)
	keyFile := filepath.Join(s.dir, "munge.key")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	sock := filepath.Join(s.dir, "munge.sock")
	conf := filepath.Join(s.dir, "slurm.conf")
	p := func(name string) string { return filepath.Join(s.dir, name) }
	text := fmt.Sprintf(`ClusterName=mrlabtest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[4]s
StateSaveLocation=%[5]s
SlurmdSpoolDir=%[6]s
SlurmctldPidFile=%[7]s
SlurmdPidFile=%[8]s
SlurmctldLogFile=%[9]s
SlurmdLogFile=%[10]s
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=1
NodeName=%[1]s NodeAddr=127.0.0.1 CPUs=%[11]d State=UNKNOWN
PartitionName=mrlab Nodes=%[1]s Default=YES MaxTime=INFINITE State=UP
`, host, freePort(t), freePort(t), sock, p("state"), p("spool"), p("slurmctld.pid"), p("slurmd.pid"),
		p("log/slurmctld.log"), p("log/slurmd.log"), max(2, runtime.NumCPU()))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s.env = append(os.Environ(), "SLURM_CONF="+conf)
	t.Cleanup(func() { s.stop(t) })
	s.start(t, munged, "-F", "--force", "-S", sock, "--key-file="+keyFile, "--log-file="+p("log/munged.log"),
		"--pid-file="+p("munged.pid"), "--seed-file="+p("munged.seed"))
	waitFor(t, 10*time.Second, "munged's socket", func() bool { _, err := os.Stat(sock); return err == nil })
	s.start(t, ctld, "-D", "-f", conf)
	s.start(t, slurmd, "-D", "-f", conf, "-N", host)
	waitFor(t, 30*time.Second, "the node to be idle", func() bool {
		out, _ := s.client("sinfo", "-h", "-o", "%t").Output()
		return strings.TrimSpace(string(out)) == "idle"
	})
	return s
}

// start runs a daemon in the foreground, its output in the log directory.
func (s *slurm) start(t *testing.T, bin string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(s.dir, "log", filepath.Base(bin)+".out"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = s.env, log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	s.procs = append(s.procs, cmd)
}

// stop cancels the cluster's jobs, waits for them, and stops the daemons
// by their pids, newest first.
func (s *slurm) stop(t *testing.T) {
	s.client("scancel", "--user=root").Run()
	end := time.Now().Add(20 * time.Second)
	for time.Now().Before(end) && s.queued() != "" {
		time.Sleep(200 * time.Millisecond)
	}
	// A job's slurmstepd is a daemon of its own, not slurmd's child, and
	// outlives the job briefly. Every process the cluster starts carries
	// this cluster's SLURM_CONF in its environment: wait for those (but
	// the daemons) to go before stopping the daemons.
	for time.Now().Before(end) && len(s.leftovers()) > len(s.procs) {
		time.Sleep(200 * time.Millisecond)
	}
	for i := len(s.procs) - 1; i >= 0; i-- {
		cmd := s.procs[i]
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Logf("%s did not stop on SIGTERM: killing pid %d", cmd.Path, cmd.Process.Pid)
			cmd.Process.Kill()
			<-done
		}
	}
	for time.Now().Before(end) && len(s.leftovers()) > 0 {
		time.Sleep(200 * time.Millisecond)
	}
	for _, pid := range s.leftovers() {
		t.Errorf("process %d of the test's Slurm still runs 20 s after its jobs: killing it", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if t.Failed() {
		for _, l := range []string{"slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"} {
			if b, err := os.ReadFile(filepath.Join(s.dir, "log", l)); err == nil {
				t.Logf("%s:\n%s", l, lastLines(string(b), 30))
			}
		}
	}
}

// leftovers returns the pids of processes whose environment holds this
// cluster's SLURM_CONF: what its daemons and jobs started.
func (s *slurm) leftovers() []int {
	mark := []byte("\x00" + s.env[len(s.env)-1] + "\x00")
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err == nil && bytes.Contains(append([]byte{0}, env...), mark) {
			out = append(out, pid)
		}
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// client returns a Slurm client command aimed at this cluster.
func (s *slurm) client(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = s.env
	return cmd
}

// queued returns the jobs in the queue, "" when it is empty.
func (s *slurm) queued() string {
	out, err := s.client("squeue", "-h", "-o", "%i %T").Output()
	if err != nil {
		return "squeue: " + err.Error()
	}
	return strings.TrimSpace(string(out))
}

// drain waits (bounded) until every job has left the queue.
func (s *slurm) drain(t *testing.T) {
	t.Helper()
	waitFor(t, 90*time.Second, "the queue to drain", func() bool { return s.queued() == "" })
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(end) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSlurmSweep runs a quick-scale experiment through --slurm on a
// single-node Slurm and wants the merged CSV and JSON byte-identical to
// the local run's; then kills one point's job, wants --status to name it
// failed and the merge job to name it missing, reruns it alone, and wants
// the same bytes again.
func TestSlurmSweep(t *testing.T) {
	testenv.RequireRoot(t)
	start := time.Now()
	cl := startSlurm(t)
	t.Logf("Slurm up in %.1fs", time.Since(start).Seconds())
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "mrlab")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mrlab := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = cl.env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mrlab %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// The smallest plan whose points run long enough (about 1.5 s each)
	// to be killed while they run: 2 cases x 1 seed.
	exp := []string{"experiment", "plane-failure", "--scale", "quick", "--seeds", "1"}
	local, sweep := filepath.Join(tmp, "local"), filepath.Join(tmp, "sweep")
	start = time.Now()
	mrlab(append(exp, "--out", local)...)
	t.Logf("local run: %.1fs", time.Since(start).Seconds())
	same := func(when string) {
		t.Helper()
		for _, f := range []string{"plane-failure.csv", "plane-failure.json"} {
			a, errA := os.ReadFile(filepath.Join(local, f))
			b, errB := os.ReadFile(filepath.Join(sweep, f))
			if errA != nil || errB != nil || !bytes.Equal(a, b) {
				t.Errorf("%s: %s differs from the local run's (%v, %v)\nlocal:\n%s\nslurm:\n%s", when, f, errA, errB, a, b)
			}
		}
	}
	jobRE := regexp.MustCompile(`array job (\d+) \((\d+) points in (\d+) tasks\), merge job (\d+)`)
	submit := func(args ...string) (array, merge string) {
		t.Helper()
		out := mrlab(append(append(exp, "--slurm", "--out", sweep), args...)...)
		m := jobRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("--slurm printed no job ids:\n%s", out)
		}
		return m[1], m[4]
	}

	// Both points in one array task (--per-task), one after the other.
	start = time.Now()
	_, merge := submit("--per-task", "2")
	cl.drain(t)
	t.Logf("through Slurm: %.1fs", time.Since(start).Seconds())
	if b, err := os.ReadFile(filepath.Join(sweep, "slurm", "merge-"+merge+".out")); err != nil || !strings.Contains(string(b), "wrote ") {
		t.Fatalf("merge job %s: %v\n%s", merge, err, b)
	}
	same("first sweep")
	if out := mrlab("experiment", "--status", sweep); !strings.Contains(out, "2 points: 2 done") {
		t.Errorf("--status after the sweep:\n%s", out)
	}

	// Kill point 1's job while it runs: its result goes, a rerun of it
	// alone is submitted, and once it has marked itself running, scancel.
	const victim = "1"
	result := filepath.Join(sweep, "point-"+victim+".json")
	if err := os.Remove(result); err != nil {
		t.Fatal(err)
	}
	array, merge := submit("--points", victim)
	waitFor(t, 60*time.Second, "point "+victim+" to start", func() bool {
		_, err := os.Stat(filepath.Join(sweep, "point-"+victim+".running"))
		return err == nil
	})
	if out, err := cl.client("scancel", array+"_"+victim).CombinedOutput(); err != nil {
		t.Fatalf("scancel %s_%s: %v\n%s", array, victim, err, out)
	}
	cl.drain(t)
	t.Logf("killed point %s's job; queue drained at %.1fs", victim, time.Since(start).Seconds())
	if _, err := os.Stat(result); err == nil {
		t.Fatalf("point %s finished before scancel reached it; its result is there", victim)
	}
	status := mrlab("experiment", "--status", sweep)
	t.Logf("--status after scancel:\n%s", status)
	if !regexp.MustCompile(`failed +point `+victim+`: mrlab sim .*stopped by signal terminated`).MatchString(status) ||
		!strings.Contains(status, "2 points: 1 done, 0 running, 1 failed") || !strings.Contains(status, "--slurm --points "+victim) {
		t.Errorf("--status does not name point %s failed by the signal, with the rerun:\n%s", victim, status)
	}
	if b, _ := os.ReadFile(filepath.Join(sweep, "slurm", "merge-"+merge+".out")); !strings.Contains(string(b), "1 of 2 points have no result: "+victim) {
		t.Errorf("merge job %s after the kill does not name point %s missing:\n%s", merge, victim, b)
	}

	// Rerun it alone, waiting for the merge after it: the same bytes.
	_, merge = submit("--points", victim, "--wait")
	cl.drain(t)
	t.Logf("reran point %s at %.1fs", victim, time.Since(start).Seconds())
	if b, err := os.ReadFile(filepath.Join(sweep, "slurm", "merge-"+merge+".out")); err != nil || !strings.Contains(string(b), "wrote ") {
		t.Fatalf("merge job %s after the rerun: %v\n%s", merge, err, b)
	}
	same("after the rerun")
	if out := mrlab("experiment", "--status", sweep); !strings.Contains(out, "2 points: 2 done") {
		t.Errorf("--status after the rerun:\n%s", out)
	}
}
