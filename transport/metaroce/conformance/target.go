package conformance

// Target opens implementations under test, one fresh IUT per script.
type Target interface {
	// Name is the target as the user named it (sim, udp:ADDR:PORT).
	Name() string
	// Open starts a fresh IUT with a script's "iut:" settings.
	Open(settings map[string]uint64) (IUT, error)
}

// InMeta is what the tester sets around a packet it injects: the IUT NIC
// port it arrives on, its UDP source port and its IPv4 ECN field.
type InMeta struct {
	Port    int
	SrcPort uint16
	CE      bool
}

// IUT is one implementation under test as the harness drives it. Times are
// nanoseconds since Open on the IUT's clock (virtual for sim, the wall
// clock over UDP).
type IUT interface {
	// Now is the IUT's current time.
	Now() int64
	// Run lets time pass until the given time or until the IUT has sent
	// something, whichever comes first, and returns what it sent.
	Run(until int64) ([]Sent, error)
	// Inject hands the IUT one packet from the tester, now.
	Inject(pkt []byte, m InMeta) error
	// Do performs an application action (dial, write, write_imm, send,
	// send_imm, read, recv, close) with its arguments.
	Do(verb string, args map[string]uint64) error
	// Completions returns the completions reported since the last call.
	Completions() ([]Completion, error)
	// Mem reads n bytes of the IUT's memory at addr in region key.
	Mem(key uint32, addr uint64, n int) ([]byte, error)
	// Counter reads one of the IUT's counters (docs/conformance.md).
	Counter(name string) (uint64, error)
	// State is the connection's state: none, connecting, established,
	// closed or error.
	State() (string, error)
	// Close ends the IUT.
	Close() error
}
