package live

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeOps records what teardown does; no namespace is touched.
type fakeOps struct {
	exists  map[string]bool
	alive   map[int]bool
	deleted []string
	failOn  string
}

func (f *fakeOps) NamespaceExists(name string) bool { return f.exists[name] }
func (f *fakeOps) DeleteNamespace(name string) error {
	if name == f.failOn {
		return errors.New("device or resource busy")
	}
	f.deleted = append(f.deleted, name)
	delete(f.exists, name)
	return nil
}
func (f *fakeOps) ProcessAlive(pid int, _ uint64) bool { return f.alive[pid] }

func writeState(t *testing.T, dir string, s *State) {
	t.Helper()
	if err := s.save(dir); err != nil {
		t.Fatal(err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := &State{Lab: "x", PID: 42, Socket: socketPath(dir, "x"), Namespaces: []string{"mrl-x-a"},
		Hosts: []StateHost{{Name: "a", Namespace: "mrl-x-a", Iface: "mr0", Addr: "198.18.0.1"}}}
	writeState(t, dir, s)
	got, err := ReadState(dir, "x")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(s, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	if _, ok := got.Host("a"); !ok {
		t.Error("Host(a) not found")
	}
	labs, _ := ListStates(dir)
	if d := cmp.Diff([]string{"x"}, labs); d != "" {
		t.Error(d)
	}
}

func TestReadStateErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadState(dir, "none"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("missing state: %v, want ErrNotRunning", err)
	}
	for name, body := range map[string]string{
		"garbage": "{not json",
		"other":   `{"lab":"someone-else"}`,
		"badns":   `{"lab":"badns","namespaces":["../../etc"]}`,
	} {
		os.WriteFile(StatePath(dir, name), []byte(body), 0o600)
		if _, err := ReadState(dir, name); err == nil || errors.Is(err, ErrNotRunning) {
			t.Errorf("%s: err = %v, want a parse error", name, err)
		}
	}
}

func TestClaimRefusesRunningLab(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir, &State{Lab: "x", PID: 7, Namespaces: []string{"mrl-x-a"}})
	ops := &fakeOps{alive: map[int]bool{7: true}, exists: map[string]bool{"mrl-x-a": true}}
	err := claim(dir, &State{Lab: "x", PID: 8}, ops, t.Logf)
	if !errors.Is(err, ErrRunning) {
		t.Fatalf("claim over a live lab: %v, want ErrRunning", err)
	}
	if len(ops.deleted) != 0 {
		t.Errorf("claim deleted %v from a live lab", ops.deleted)
	}
	if s, _ := ReadState(dir, "x"); s == nil || s.PID != 7 {
		t.Errorf("live lab's state changed: %+v", s)
	}
}

func TestClaimCleansStaleLab(t *testing.T) {
	dir := t.TempDir()
	sock := socketPath(dir, "x")
	os.WriteFile(sock, nil, 0o600) // stands in for the dead lab's socket
	writeState(t, dir, &State{Lab: "x", PID: 7, Socket: sock, Namespaces: []string{"mrl-x-a", "mrl-x-b", "mrl-x-c"}})
	// b was already gone; "mrl-other" exists but is not the lab's.
	ops := &fakeOps{exists: map[string]bool{"mrl-x-a": true, "mrl-x-c": true, "mrl-other": true}}
	if err := claim(dir, &State{Lab: "x", PID: 8}, ops, t.Logf); err != nil {
		t.Fatal(err)
	}
	sort.Strings(ops.deleted)
	if d := cmp.Diff([]string{"mrl-x-a", "mrl-x-c"}, ops.deleted); d != "" {
		t.Errorf("deleted (-want +got):\n%s", d)
	}
	if !ops.exists["mrl-other"] {
		t.Error("a namespace the lab did not record was deleted")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Error("stale socket left behind")
	}
	s, err := ReadState(dir, "x")
	if err != nil || s.PID != 8 || len(s.Namespaces) != 0 {
		t.Errorf("new state = %+v, %v", s, err)
	}
}

func TestDownStaleLab(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir, &State{Lab: "x", PID: 7, Namespaces: []string{"mrl-x-a"}})
	ops := &fakeOps{exists: map[string]bool{"mrl-x-a": true}}
	if err := Down(context.Background(), dir, "x", ops); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"mrl-x-a"}, ops.deleted); d != "" {
		t.Error(d)
	}
	if _, err := ReadState(dir, "x"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("state after down: %v", err)
	}
	if err := Down(context.Background(), dir, "x", ops); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second down: %v, want ErrNotRunning", err)
	}
}

func TestCleanupKeepsStateWhenDeleteFails(t *testing.T) {
	dir := t.TempDir()
	s := &State{Lab: "x", PID: 7, Namespaces: []string{"mrl-x-a", "mrl-x-b"}}
	writeState(t, dir, s)
	ops := &fakeOps{exists: map[string]bool{"mrl-x-a": true, "mrl-x-b": true}, failOn: "mrl-x-a"}
	if err := cleanup(dir, s, ops); err == nil {
		t.Fatal("cleanup reported success with a namespace left")
	}
	if _, err := ReadState(dir, "x"); err != nil {
		t.Errorf("state file gone although mrl-x-a is left: %v", err)
	}
	ops.failOn = ""
	if err := cleanup(dir, s, ops); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadState(dir, "x"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("state after retry: %v", err)
	}
}

func TestProcessAlive(t *testing.T) {
	ticks, err := processStartTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ops := SystemOps{}
	if !ops.ProcessAlive(os.Getpid(), ticks) {
		t.Error("this process is not alive")
	}
	if ops.ProcessAlive(os.Getpid(), ticks+1) {
		t.Error("a reused pid (other start time) counted as alive")
	}
	if ops.ProcessAlive(0, 0) || ops.ProcessAlive(-1, 0) {
		t.Error("pid <= 0 alive")
	}
}

// TestZombieIsNotAlive: a lab process killed with SIGKILL is a zombie until
// its parent reaps it; `up` right after must not call it running.
func TestZombieIsNotAlive(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	pid := cmd.Process.Pid
	ticks, err := processStartTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !(SystemOps{}).ProcessAlive(pid, ticks) {
		t.Fatal("a running child is not alive")
	}
	cmd.Process.Kill()
	// Not reaped yet: wait (boundedly) until the kernel shows it exited.
	for i := 0; ; i++ {
		f, err := procStat(pid)
		if err == nil && f[0] == "Z" {
			break
		}
		if i == 1000 {
			t.Fatalf("child never became a zombie: %v %v", f, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if (SystemOps{}).ProcessAlive(pid, ticks) {
		t.Error("a zombie counted as alive")
	}
	cmd.Wait()
}

// TestExecIntoDeadLab: exec into a lab whose process is gone is an error
// naming the way out, not a silent run in its orphaned namespaces.
func TestExecIntoDeadLab(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir, &State{Lab: "dead", PID: 0, Namespaces: []string{"mrl-dead-a"},
		Hosts: []StateHost{{Name: "a", Namespace: "mrl-dead-a", Iface: "mr0", Addr: "198.18.0.1"}}})
	err := Exec(dir, "dead", "a", exec.Command("true"))
	if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "mrlab down dead") {
		t.Errorf("exec into a dead lab: %v", err)
	}
}
