package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mrlab/mrlab/labs/hostns"
)

// DefaultRunDir holds running labs' state files and control sockets.
const DefaultRunDir = "/run/mrlab"

// ErrRunning is returned when a lab of that name is already up.
var ErrRunning = errors.New("lab is already running")

// ErrNotRunning is returned when no state file exists for the lab.
var ErrNotRunning = errors.New("lab is not running")

// State is a live lab's record of what it created, kept in
// <RunDir>/<lab>.json. It is written before anything is created and updated
// as things are, so teardown — by the lab itself, or by `mrlab down` after
// the process died — removes exactly these names and nothing else.
type State struct {
	Lab string `json:"lab"`
	// PID and StartTicks identify the lab process (StartTicks, from
	// /proc/PID/stat, guards against a reused pid).
	PID        int       `json:"pid"`
	StartTicks uint64    `json:"start_ticks"`
	Started    time.Time `json:"started"`
	// Owner is the uid of the user who started the lab (SUDO_UID when
	// started through sudo): commands without --lab act only on their
	// caller's labs, so a shared box's users never touch each other's.
	Owner  int    `json:"owner"`
	Socket string `json:"socket"`
	Log    string `json:"log,omitempty"`
	// Metrics is the loopback host:port of the lab's Prometheus endpoint
	// (http://<Metrics>/metrics), empty when it serves none.
	Metrics string      `json:"metrics,omitempty"`
	Hosts   []StateHost `json:"hosts"`
	// Namespaces lists the namespaces this lab created, recorded before
	// each is created (a name is only recorded after checking it is free).
	Namespaces []string `json:"namespaces"`
}

// StateHost maps a lab host to its namespace and interface.
type StateHost struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Iface     string `json:"iface"`
	Addr      string `json:"addr"`
}

// Host returns the host called name.
func (s *State) Host(name string) (StateHost, bool) {
	for _, h := range s.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return StateHost{}, false
}

// HostNames returns the lab's host names, in lab order.
func (s *State) HostNames() []string {
	names := make([]string, len(s.Hosts))
	for i, h := range s.Hosts {
		names[i] = h.Name
	}
	return names
}

// CallerUID is the user a command acts for: SUDO_UID when root runs it
// through sudo, else the real uid.
func CallerUID() int {
	uid := os.Getuid()
	if uid == 0 {
		if s := os.Getenv("SUDO_UID"); s != "" {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 {
				return n
			}
		}
	}
	return uid
}

// ValidLabName checks a lab name: it becomes part of namespace and file
// names, so it is short and plain.
func ValidLabName(name string) error {
	if name == "" || len(name) > 32 {
		return fmt.Errorf("lab name %q: want 1..32 characters", name)
	}
	for _, c := range name {
		if !(c == '-' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
			return fmt.Errorf("lab name %q: character %q (want letters, digits, '-', '_')", name, c)
		}
	}
	return nil
}

// NamespaceName returns the namespace of host in lab: mrl-<lab>-<host>.
func NamespaceName(lab, host string) string { return "mrl-" + lab + "-" + host }

// StatePath returns the state file of lab under dir.
func StatePath(dir, lab string) string { return filepath.Join(dir, lab+".json") }

// socketPath returns the control socket of lab under dir.
func socketPath(dir, lab string) string { return filepath.Join(dir, lab+".sock") }

// LogPath returns where a background lab writes its log.
func LogPath(dir, lab string) string { return filepath.Join(dir, lab+".log") }

// ReadState reads lab's state file. It returns ErrNotRunning (wrapped) if
// there is none.
func ReadState(dir, lab string) (*State, error) {
	p := StatePath(dir, lab)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("lab %s: %w (no %s)", lab, ErrNotRunning, p)
	}
	if err != nil {
		return nil, fmt.Errorf("reading lab state: %w", err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("reading lab state %s: %w", p, err)
	}
	if s.Lab != lab {
		return nil, fmt.Errorf("reading lab state %s: it records lab %q", p, s.Lab)
	}
	for _, ns := range s.Namespaces {
		if err := hostns.ValidName(ns); err != nil {
			return nil, fmt.Errorf("reading lab state %s: %w", p, err)
		}
	}
	return &s, nil
}

// ListStates returns the names of labs with a state file under dir, sorted.
func ListStates(dir string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var labs []string
	for _, p := range m {
		labs = append(labs, strings.TrimSuffix(filepath.Base(p), ".json"))
	}
	return labs, nil // Glob sorts
}

// save writes the state file atomically (temp file, rename).
func (s *State) save(dir string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	p := StatePath(dir, s.Lab)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing lab state: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("writing lab state: %w", err)
	}
	return nil
}

// Ops are the system operations teardown performs; tests substitute fakes.
type Ops interface {
	NamespaceExists(name string) bool
	DeleteNamespace(name string) error
	// ProcessAlive reports whether the process pid, started at startTicks
	// (0: unknown), is still running.
	ProcessAlive(pid int, startTicks uint64) bool
}

// SystemOps performs teardown on this machine.
type SystemOps struct{}

// NamespaceExists reports whether the named namespace exists.
func (SystemOps) NamespaceExists(name string) bool { return hostns.Exists(name) }

// DeleteNamespace ends the processes still in the named namespace (a
// program run with `mrlab exec` that outlived its lab would keep the
// namespace alive, unnamed) and deletes it.
func (SystemOps) DeleteNamespace(name string) error {
	_, err := endProcessesIn(name)
	return errors.Join(err, hostns.Delete(name))
}

// ProcessAlive checks the pid and, when known, its start time. A process
// that has exited but not been reaped yet (a zombie, as a lab killed with
// SIGKILL is until its parent waits) is not alive.
func (SystemOps) ProcessAlive(pid int, startTicks uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	f, err := procStat(pid)
	if err != nil {
		return false
	}
	if f[0] == "Z" || f[0] == "X" {
		return false
	}
	if startTicks == 0 {
		return true
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	return err == nil && t == startTicks
}

// processStartTicks reads field 22 (starttime) of /proc/PID/stat.
func processStartTicks(pid int) (uint64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// procStat returns the fields of /proc/PID/stat from the third (state)
// on: f[0] is the state, f[19] the start time.
func procStat(pid int) ([]string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3; starttime is field 22.
	if len(f) < 20 {
		return nil, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(f))
	}
	return f, nil
}

// claim creates lab's state file exclusively. If one exists and its
// process is alive, it fails with ErrRunning; if the process is gone, the
// stale lab is cleaned up first (logged through logf).
func claim(dir string, s *State, ops Ops, logf func(string, ...any)) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating run directory: %w", err)
	}
	for attempt := 0; attempt < 2; attempt++ {
		f, err := os.OpenFile(StatePath(dir, s.Lab), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			f.Close()
			return s.save(dir)
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("creating lab state: %w", err)
		}
		old, rerr := ReadState(dir, s.Lab)
		if rerr != nil {
			// Exists but unreadable: maybe being written right now. Refuse
			// rather than guess.
			return fmt.Errorf("lab %s: %w (state file %s unreadable: %v; `mrlab down %s` removes it)", s.Lab, ErrRunning, StatePath(dir, s.Lab), rerr, s.Lab)
		}
		if ops.ProcessAlive(old.PID, old.StartTicks) {
			return fmt.Errorf("lab %s: %w (pid %d, socket %s)", s.Lab, ErrRunning, old.PID, old.Socket)
		}
		logf("lab %s: cleaning up after a previous run (pid %d is gone)", s.Lab, old.PID)
		if err := cleanup(dir, old, ops); err != nil {
			return err
		}
	}
	return fmt.Errorf("lab %s: %w (state file reappeared)", s.Lab, ErrRunning)
}

// cleanup removes what the state records — namespaces, then the socket,
// then the state file itself — skipping what is already gone. It is what
// `mrlab down` does for a lab whose process died, and what a lab does on
// its way out. Only names listed in the state are touched.
func cleanup(dir string, s *State, ops Ops) error {
	var errs []error
	for _, ns := range s.Namespaces {
		if !ops.NamespaceExists(ns) {
			continue
		}
		if err := ops.DeleteNamespace(ns); err != nil {
			errs = append(errs, fmt.Errorf("lab %s: %w", s.Lab, err))
		}
	}
	if len(errs) > 0 {
		// Keep the state file so a later `mrlab down` can retry.
		return errors.Join(errs...)
	}
	if s.Socket != "" && filepath.Dir(s.Socket) == filepath.Clean(dir) {
		if err := os.Remove(s.Socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing socket: %w", err))
		}
	}
	if err := os.Remove(StatePath(dir, s.Lab)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing lab state: %w", err))
	}
	return errors.Join(errs...)
}
