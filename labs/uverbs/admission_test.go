package uverbs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
	"github.com/mrlab/mrlab/verbs"
)

// TestMain lets the test binary double as a process in another network
// namespace that was handed a connected endpoint socket.
func TestMain(m *testing.M) {
	if os.Getenv("UVERBS_TEST_HELPER") == "passed-socket" {
		os.Exit(passedSocketHelper())
	}
	os.Exit(m.Run())
}

// passedSocketHelper sends ALLOC_PD on the socket it was given (fd 3)
// and prints the reply's code and text, or "hangup".
func passedSocketHelper() int {
	f := os.NewFile(3, "endpoint")
	c, err := net.FileConn(f)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	uc := c.(*net.UnixConn)
	if _, _, err := uc.WriteMsgUnix(verbsabi.AppendRequest(nil, &verbsabi.Request{Op: verbsabi.OpAllocPD, Seq: 2}), nil, nil); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	buf := make([]byte, verbsabi.MaxMessage)
	uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := uc.Read(buf)
	if err != nil || n == 0 {
		fmt.Println("hangup")
		return 0
	}
	rep, err := verbsabi.DecodeReply(buf[:n], 0)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Printf("%v %s\n", rep.Code, rep.Text)
	return 0
}

// TestThreadMovedOut: a process that said HELLO in the host and then
// moved one thread into another network namespace is refused on its next
// control message, and its session is closed (everything it held is
// released); before the move the same call succeeds.
func TestThreadMovedOut(t *testing.T) {
	testenv.RequireNamespaces(t)
	lab := uverbstest.Start(t, uverbstest.Options{})
	dev, err := verbs.OpenEndpoint(context.Background(), lab.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := dev.AllocPD(); err != nil {
		t.Fatalf("AllocPD before the move: %v", err)
	}
	moved, release, back := make(chan error), make(chan struct{}), make(chan error)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err == nil {
			defer orig.Close()
			err = unix.Unshare(unix.CLONE_NEWNET)
		}
		moved <- err
		<-release
		// Back home, so that the rest of the tests run in one namespace;
		// a thread that cannot return is never unlocked (the runtime
		// ends it with this goroutine).
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			back <- err
			return
		}
		runtime.UnlockOSThread()
		back <- nil
	}()
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	_, err = dev.AllocPD()
	close(release)
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, verbs.ErrNotPermitted) || !strings.Contains(err.Error(), "network namespace") {
		t.Fatalf("AllocPD with a thread moved out: %v, want ErrNotPermitted naming the namespace", err)
	}
	lab.WaitNoClients(t, 5*time.Second)
	if _, err := dev.AllocPD(); err == nil {
		t.Error("the session still works after the refusal")
	}
}

// TestPassedSocket: a socket connected (and past HELLO) in the host and
// passed to a process in another network namespace cannot drive the
// host's NIC: that process's first message is refused and the session
// closed.
func TestPassedSocket(t *testing.T) {
	testenv.RequireNamespaces(t)
	lab := uverbstest.Start(t, uverbstest.Options{})
	r := dialRaw(t, lab.Endpoints[0])
	r.hello()
	f, err := r.conn.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UVERBS_TEST_HELPER=passed-socket")
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, verbsabi.CodeNotPermitted.String()) || !strings.Contains(got, "another process") {
		t.Fatalf("ALLOC_PD from a process in another namespace on a passed socket: %q, want %v naming another process", got, verbsabi.CodeNotPermitted)
	}
	lab.WaitNoClients(t, 5*time.Second)
}
