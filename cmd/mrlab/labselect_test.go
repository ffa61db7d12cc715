package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrlab/mrlab/labs/live"
)

// writeLabState writes a state file for a lab started by owner whose
// control socket is a listener that counts connections: a command that
// acts on the lab at all dials it.
func writeLabState(t *testing.T, dir, name string, owner int) *atomic.Int32 {
	t.Helper()
	sock := filepath.Join(dir, name+".sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	st := live.State{Lab: name, PID: os.Getpid(), Started: time.Now().UTC(), Socket: sock, Owner: owner,
		Hosts: []live.StateHost{{Name: "h0", Namespace: live.NamespaceName(name, "h0"), Iface: "mr0", Addr: "198.18.0.1"}}}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(live.StatePath(dir, name), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return &dials
}

// TestLabSelectionNeverPicksAnotherUsersLab: with only another user's lab
// running, no command without --lab acts on it; with two of the caller's
// own, a bare command refuses and lists them.
func TestLabSelectionNeverPicksAnotherUsersLab(t *testing.T) {
	dir := t.TempDir()
	me := live.CallerUID()
	other := me + 4242
	dials := writeLabState(t, dir, "neighbour", other)

	bare := [][]string{
		{"down", "--run-dir", dir},
		{"exec", "--run-dir", dir, "h0", "--", "true"},
		{"fault", "plane", "--run-dir", dir, "1", "down"},
		{"status", "--run-dir", dir},
		{"top", "--run-dir", dir, "--once"},
	}
	for _, args := range bare {
		code, _, errs := runCLI(t, args...)
		if code == 0 || !strings.Contains(errs, "no lab of yours") || !strings.Contains(errs, "neighbour") {
			t.Errorf("%v: exit %d, stderr %q; want a refusal naming the other user's lab", args, code, errs)
		}
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("commands without --lab dialled the other user's lab %d times", n)
	}
	if _, err := os.Stat(live.StatePath(dir, "neighbour")); err != nil {
		t.Errorf("a bare down touched the other user's lab: %v", err)
	}

	// Named, it is reachable: --lab before or after the subcommand.
	for _, args := range [][]string{
		{"fault", "--lab", "neighbour", "plane", "--run-dir", dir, "1", "down"},
		{"fault", "plane", "--lab", "neighbour", "--run-dir", dir, "1", "down"},
		{"status", "--run-dir", dir, "-l", "neighbour"},
	} {
		before := dials.Load()
		code, _, errs := runCLI(t, args...)
		if strings.Contains(errs, "not defined") || strings.Contains(errs, "no lab of yours") {
			t.Errorf("%v: exit %d, stderr %q; want it to reach the named lab", args, code, errs)
		}
		if dials.Load() == before {
			t.Errorf("%v: did not reach the named lab (stderr %q)", args, errs)
		}
	}

	// Two of mine: refuse and list.
	writeLabState(t, dir, "mine-a", me)
	writeLabState(t, dir, "mine-b", me)
	code, _, errs := runCLI(t, "status", "--run-dir", dir)
	if code != 2 || !strings.Contains(errs, "mine-a, mine-b") {
		t.Errorf("status with two own labs: exit %d, stderr %q; want a usage refusal listing both", code, errs)
	}

	// A name that is not running says so, with what is.
	code, _, errs = runCLI(t, "down", "--run-dir", dir, "nope")
	if code == 0 || !strings.Contains(errs, "lab nope: lab is not running") || !strings.Contains(errs, "neighbour (uid") {
		t.Errorf("down nope: exit %d, stderr %q; want 'not running' with the running labs", code, errs)
	}

	// ls lists all three, marking mine.
	code, out, errs := runCLI(t, "ls", "--run-dir", dir, "--json")
	var got []lsEntry
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got) != 3 {
		t.Fatalf("ls --json: exit %d, %q %q", code, out, errs)
	}
	for _, e := range got {
		if e.Mine != (e.Lab != "neighbour") || e.Hosts != 1 || !e.Alive {
			t.Errorf("ls entry %+v", e)
		}
	}
}
