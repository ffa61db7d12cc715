package verbs

import (
	"errors"
	"net"

	"github.com/mrlab/mrlab/internal/verbsabi"
)

// Errors a call can fail with, wrapped in an *Error that says what was
// being done and what the endpoint answered. Match them with errors.Is.
var (
	// ErrNoEndpoint: this process is not in a live lab host.
	ErrNoEndpoint = errors.New("no verbs endpoint")
	// ErrNotPermitted: the endpoint refused this process (it is not in
	// the host's network namespace).
	ErrNotPermitted = errors.New("not permitted")
	// ErrVersion: the lab speaks another ABI version.
	ErrVersion = errors.New("ABI version mismatch")
	// ErrNotFound: a handle names no object of this process.
	ErrNotFound = errors.New("no such object")
	// ErrInvalid: an argument is out of range.
	ErrInvalid = errors.New("invalid argument")
	// ErrLimit: a per-process limit would be exceeded (Device.Limits).
	ErrLimit = errors.New("limit exceeded")
	// ErrBusy: the object is in use (a port another process listens on,
	// a CQ a QP uses, a QP already connected).
	ErrBusy = errors.New("busy")
	// ErrConnFailed: the connection could not be set up.
	ErrConnFailed = errors.New("connection failed")
	// ErrCanceled: the request was canceled (a listener closed under a
	// pending Accept, a QP destroyed under a pending Connect).
	ErrCanceled = errors.New("canceled")
	// ErrBadMemory: the lab could not map the memory to register.
	ErrBadMemory = errors.New("unusable memory")
	// ErrLabStopped: the lab process is gone (it exited or was killed):
	// nothing serves this host's NIC any more. Device.Err returns it, and
	// every blocking call and post fails with it, as soon as the kernel
	// closes the lab's end of the endpoint socket. An error matching it
	// matches ErrClosed too.
	ErrLabStopped = errors.New("the lab stopped")
	// ErrShutdown: the lab is stopping.
	ErrShutdown = errors.New("lab shutting down")
	// ErrNoTransport: the host's NIC does not speak that transport.
	ErrNoTransport = errors.New("no such transport")
	// ErrQueueFull: a post would overfill the queue (or have more work
	// outstanding than it has entries): poll completions first.
	ErrQueueFull = errors.New("queue full")
	// ErrMalformed: the endpoint could not decode a message and closed
	// this process's session (a bug in the client).
	ErrMalformed = errors.New("malformed message")
	// ErrClosed: the device or object was closed. It is net.ErrClosed.
	ErrClosed = net.ErrClosed
)

// Error is a failed call: the operation, the sentinel error it matches
// and the endpoint's (or this package's) explanation.
type Error struct {
	Op  string
	Err error
	Msg string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return "verbs: " + e.Op + ": " + e.Err.Error()
	}
	return "verbs: " + e.Op + ": " + e.Msg
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

// Is makes a stopped lab's error match ErrClosed as well: the endpoint
// is closed, for the stated reason.
func (e *Error) Is(target error) bool { return e.Err == ErrLabStopped && target == ErrClosed }

var codeErrs = map[verbsabi.Code]error{
	verbsabi.CodeMalformed: ErrMalformed, verbsabi.CodeVersion: ErrVersion, verbsabi.CodeNotPermitted: ErrNotPermitted,
	verbsabi.CodeNoObject: ErrNotFound, verbsabi.CodeInvalid: ErrInvalid, verbsabi.CodeLimit: ErrLimit,
	verbsabi.CodeBusy: ErrBusy, verbsabi.CodeConnFailed: ErrConnFailed, verbsabi.CodeCanceled: ErrCanceled,
	verbsabi.CodeBadMemory: ErrBadMemory, verbsabi.CodeShutdown: ErrShutdown, verbsabi.CodeNoTransport: ErrNoTransport,
}

func codeError(op string, c verbsabi.Code, text string) error {
	err := codeErrs[c]
	if err == nil {
		err = errors.New(c.String())
	}
	return &Error{Op: op, Err: err, Msg: text}
}
