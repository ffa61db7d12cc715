// Package tutorial holds the tutorial's lessons (Markdown) and the test
// that runs them: every command a lesson shows runs, and what the lesson
// says you will see is checked.
//
// A lesson's ```console blocks hold commands ("$ " lines; a trailing "\"
// continues one) and the output each prints (the lines after it, up to the
// next command). The output shown is what the command printed when the
// lesson was last generated, and the test checks it exactly: a command's
// shown lines must equal what it prints now (trailing blanks aside). A
// command with no lines after it shows no output and is not compared. To
// regenerate the shown output from a run (after a change that moves a
// figure, or to start showing a command's output: put any line after it),
//
//	go test ./docs/tutorial -run TestLessons -update
//
// rewrites the lessons in place (live lessons need root; review the diff).
// Runs are deterministic in sim mode, so a sim block matches byte for byte.
// A live lab runs on the wall clock, so its figures vary from run to run; a
// live block lists what varies, each with its reason in the lesson:
//
//	<!-- varies: REGEX -->  matches of REGEX (and runs of blanks) are not compared
//
// The test runs each block's commands as one shell script in a scratch directory
// that looks like a checkout (labs/, examples/, go.mod ... are links to
// the repository's), with a freshly built mrlab first on PATH and "sudo "
// dropped (the test runs as root when it runs live lessons). HTML
// comments after a block state what its output shows:
//
//	<!-- expect: REGEX -->              the output matches REGEX (multi-line mode)
//	<!-- expect-not: REGEX -->          it does not
//	<!-- expect-lines: N REGEX -->      exactly N lines match REGEX
//	<!-- expect-value: REGEX OP NUM --> REGEX's first group, a number, is OP (<, <=, >, >=, ==) NUM
//	<!-- expect-file: PATH: REGEX -->   the file PATH (in the scratch directory) matches REGEX
//	<!-- image: PATH -> IMG -->         the lesson's image IMG is the file PATH the block wrote,
//	                                    byte for byte (-update copies it)
//
// The expectations below state in words what a block shows; they hold on
// every run, also where a live block's figures vary.
//
// A block whose info string says "live" needs root and network namespaces,
// and a command running tshark, iperf3, ping, cc, ib_write_bw or ibv_devices
// needs that tool (in CI
// they must be there; elsewhere the lesson skips).
package tutorial

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
)

// block is one ```console block and the expectations after it.
type block struct {
	line   int // of the opening fence
	live   bool
	script []string
	// shown[i] is the output the lesson shows for script[i], and
	// shownAt[i] the file lines it occupies: [start, end), 0-based.
	shown   [][]string
	shownAt [][2]int
	varies  []*regexp.Regexp
	expect  []expectation
}

type expectation struct {
	line int
	kind string // expect, expect-not, expect-lines, expect-value, expect-file
	text string
}

var (
	expectRe = regexp.MustCompile(`^<!-- (expect(?:-not|-lines|-value|-file)?|image): (.*) -->$`)
	variesRe = regexp.MustCompile(`^<!-- varies: (.*) -->$`)
)

// parseLesson reads a lesson's blocks.
func parseLesson(path string) ([]block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var blocks []block
	var cur *block
	in := false
	cont := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case !in && strings.HasPrefix(l, "```console"):
			blocks = append(blocks, block{line: n, live: strings.Contains(l, "live")})
			cur, in = &blocks[len(blocks)-1], true
		case in && strings.HasPrefix(l, "```"):
			in = false
			if cont != "" {
				return nil, fmt.Errorf("%s:%d: command continues past the block's end", path, n)
			}
		case in:
			if cont != "" {
				cont += " " + strings.TrimSpace(strings.TrimSuffix(l, "\\"))
				if !strings.HasSuffix(l, "\\") {
					cur.addCommand(cont, n)
					cont = ""
				}
				continue
			}
			if cmd, ok := strings.CutPrefix(l, "$ "); ok {
				if strings.HasSuffix(cmd, "\\") {
					cont = strings.TrimSpace(strings.TrimSuffix(cmd, "\\"))
					continue
				}
				cur.addCommand(cmd, n)
				continue
			}
			if len(cur.script) == 0 {
				return nil, fmt.Errorf("%s:%d: output before the block's first command", path, n)
			}
			i := len(cur.script) - 1
			cur.shown[i] = append(cur.shown[i], l)
			cur.shownAt[i][1] = n
		case cur != nil:
			if m := expectRe.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
				cur.expect = append(cur.expect, expectation{line: n, kind: m[1], text: m[2]})
			}
			if m := variesRe.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
				re, err := regexp.Compile(m[1])
				if err != nil {
					return nil, fmt.Errorf("%s:%d: varies: %w", path, n, err)
				}
				if !cur.live {
					return nil, fmt.Errorf("%s:%d: a sim block's output does not vary: show what it prints", path, n)
				}
				cur.varies = append(cur.varies, re)
			}
		}
	}
	return blocks, sc.Err()
}

// addCommand appends a command whose last line is file line n (1-based);
// its output starts on the next line.
func (b *block) addCommand(cmd string, n int) {
	b.script = append(b.script, cmd)
	b.shown = append(b.shown, nil)
	b.shownAt = append(b.shownAt, [2]int{n, n})
}

// mrlabBinary builds mrlab once for all lessons.
func mrlabBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "mrlab")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/mrlab/mrlab/cmd/mrlab")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building mrlab: %v\n%s", err, out)
	}
	return bin
}

// linkCheckout makes work look like a checkout of the repository at
// repo: each of its top-level entries but dot files is a symlink there,
// so lessons read labs/ and build examples/ as a user in a checkout
// would, while what they write stays in work.
func linkCheckout(repo, work string) error {
	entries, err := os.ReadDir(repo)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := os.Symlink(filepath.Join(repo, e.Name()), filepath.Join(work, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// goEnv returns the Go command's cache and configuration settings as
// NAME=VALUE, so that a lesson's go build, whose HOME is its scratch
// directory, shares the test's build and module caches (no rebuild of
// the standard library, no download).
func goEnv(t *testing.T) []string {
	t.Helper()
	names := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV"}
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	vals := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(vals) != len(names) {
		t.Fatalf("go env printed %q", out)
	}
	env := make([]string, len(names))
	for i, n := range names {
		env[i] = n + "=" + vals[i]
	}
	return env
}

// TestTutorialIndex: at least six lessons, each linked from the index
// and holding a lab of its own under labs/examples/tutorial.
func TestTutorialIndex(t *testing.T) {
	lessons, _ := filepath.Glob("[0-9][0-9]-*.md")
	if len(lessons) < 6 {
		t.Errorf("%d lessons, want at least 6", len(lessons))
	}
	index, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lessons {
		if !strings.Contains(string(index), "("+l+")") {
			t.Errorf("README.md does not link %s", l)
		}
		data, _ := os.ReadFile(l)
		if !strings.Contains(string(data), "labs/examples/tutorial/") {
			t.Errorf("%s uses no lab of labs/examples/tutorial", l)
		}
	}
}

func TestLessons(t *testing.T) {
	lessons, err := filepath.Glob("[0-9][0-9]-*.md")
	if err != nil || len(lessons) == 0 {
		t.Fatalf("no lessons: %v", err)
	}
	sort.Strings(lessons)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	mrlabBinary(t, binDir)
	env := append(os.Environ(), goEnv(t)...)
	for _, lesson := range lessons {
		t.Run(strings.TrimSuffix(lesson, ".md"), func(t *testing.T) {
			blocks, err := parseLesson(lesson)
			if err != nil {
				t.Fatal(err)
			}
			if len(blocks) == 0 {
				t.Fatalf("%s has no console blocks", lesson)
			}
			work := t.TempDir()
			if err := linkCheckout(repo, work); err != nil {
				t.Fatal(err)
			}
			runDir := filepath.Join(work, "run")
			for _, b := range blocks {
				if b.live {
					testenv.RequireNamespaces(t)
				}
				for _, cmd := range b.script {
					for _, tool := range []string{"tshark", "iperf3", "ping", "cc", "ib_write_bw", "ibv_devices"} {
						if slices.Contains(strings.Fields(cmd), tool) {
							testenv.RequireCommand(t, tool)
						}
					}
				}
			}
			t.Cleanup(func() { downLabs(binDir, runDir) })
			var edits []edit
			for _, b := range blocks {
				outs := runBlock(t, lesson, b, env, work, binDir, runDir)
				out := strings.Join(outs, "\n")
				for _, e := range b.expect {
					if err := check(e, out, work); err != nil {
						t.Errorf("%s:%d: %v\n--- output of the block at line %d:\n%s", lesson, e.line, err, b.line, out)
					}
				}
				for i, shown := range b.shown {
					if len(shown) == 0 {
						continue
					}
					got := outputLines(outs[i])
					if *update {
						edits = append(edits, edit{b.shownAt[i], got})
						continue
					}
					if diff := compareShown(shown, got, b.varies); diff != "" {
						t.Errorf("%s:%d: the output shown for `%s` is not what it prints (go test ./docs/tutorial -run TestLessons -update regenerates it):\n%s",
							lesson, b.shownAt[i][0]+1, b.script[i], diff)
					}
				}
				for _, e := range b.expect {
					if e.kind != "image" {
						continue
					}
					if err := checkImage(e.text, work, *update); err != nil {
						t.Errorf("%s:%d: %v", lesson, e.line, err)
					}
				}
				if *update {
					for _, re := range b.varies {
						if !slices.ContainsFunc(outs, func(o string) bool { return slices.ContainsFunc(outputLines(o), re.MatchString) }) {
							t.Errorf("%s:%d: varies %q matches nothing the block shows", lesson, b.line, re)
						}
					}
				}
			}
			if *update && len(edits) > 0 && !t.Failed() {
				if err := applyEdits(lesson, edits); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite the lessons' shown output with what their commands print now")

// edit replaces lines [at[0], at[1]) of a lesson.
type edit struct {
	at    [2]int
	lines []string
}

// applyEdits rewrites a lesson with edits (in file order, not overlapping).
func applyEdits(path string, edits []edit) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(string(data), "\n")
	for i := len(edits) - 1; i >= 0; i-- {
		e := edits[i]
		lines = slices.Replace(lines, e.at[0], e.at[1], e.lines...)
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}

// outputLines is a command's output as a lesson shows it: its lines with
// trailing blanks and trailing empty lines dropped (Markdown editors trim
// them).
func outputLines(out string) []string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// compareShown returns "" if got is what the lesson shows, else the first
// difference. In a live block each match of a varies pattern, and each
// run of blanks (columns move when a figure's width does), compares equal.
func compareShown(shown, got []string, varies []*regexp.Regexp) string {
	mask := func(l string) string {
		for _, re := range varies {
			l = re.ReplaceAllString(l, "…")
		}
		if len(varies) > 0 {
			l = strings.Join(strings.Fields(l), " ")
		}
		return l
	}
	shown, got = outputLines(strings.Join(shown, "\n")), outputLines(strings.Join(got, "\n"))
	for i := 0; i < max(len(shown), len(got)); i++ {
		var s, g string
		if i < len(shown) {
			s = shown[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if i >= len(shown) || i >= len(got) || mask(s) != mask(g) {
			return fmt.Sprintf("line %d of %d shown / %d printed:\nshown:   %q\nprinted: %q\n--- printed:\n%s", i+1, len(shown), len(got), s, g, strings.Join(got, "\n"))
		}
	}
	return ""
}

// checkImage checks (or with update, makes) a lesson's image "RUN -> IMG":
// the file RUN the block wrote in the scratch directory work is IMG.
func checkImage(spec, work string, update bool) error {
	run, img, ok := strings.Cut(spec, " -> ")
	if !ok {
		return fmt.Errorf("image %q: want RUNFILE -> LESSONFILE", spec)
	}
	got, err := os.ReadFile(filepath.Join(work, run))
	if err != nil {
		return fmt.Errorf("image: the block did not write %s: %w", run, err)
	}
	if update {
		return os.WriteFile(img, got, 0o644)
	}
	want, err := os.ReadFile(img)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("image %s is not the %s this run drew (-update copies it)", img, run)
	}
	return nil
}

// rootWarning is what tshark prints on stderr when run as root: the
// lesson's test runs as root, its readers need not, so it is not output.
const rootWarning = `Running as user "root" and group "root". This could be dangerous.`

// progressLine is the line a long sim run prints on stderr every few
// seconds of wall time when stderr is not a terminal (on one, a bar that
// clears itself): how many depends on the machine, so it is not output.
var progressLine = regexp.MustCompile(`(?m)^mrlab: .*, \S+ elapsed\n`)

// cmdMark separates the commands' outputs in a block's script output.
const cmdMark = "@@tutorial-command-output@@"

// runBlock runs a block's commands as one script and returns each
// command's output (stdout and stderr as a terminal interleaves them).
func runBlock(t *testing.T, lesson string, b block, env []string, work, binDir, runDir string) []string {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -e\n")
	for i, c := range b.script {
		if i > 0 {
			// A newline first, in case the output before did not end
			// with one; split removes it.
			fmt.Fprintf(&script, "printf '\\n%s\\n'\n", cmdMark)
		}
		script.WriteString(strings.TrimPrefix(c, "sudo ") + "\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script.String())
	cmd.Dir = work
	cmd.Env = append(slices.Clip(env), "PATH="+binDir+":"+os.Getenv("PATH"), "MRLAB_RUN_DIR="+runDir,
		"HOME="+work, "WIRESHARK_CONFIG_DIR="+filepath.Join(work, ".wireshark"))
	// Its own process group, so a timeout ends whatever it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s:%d: %v\n%s\n--- output:\n%s", lesson, b.line, err, script.String(), out)
	}
	// The lessons' labs run in a scratch run directory; a reader's run in
	// the default one, which the output shows.
	clean := strings.ReplaceAll(string(out), runDir, "/run/mrlab")
	clean = progressLine.ReplaceAllString(strings.ReplaceAll(clean, rootWarning+"\n", ""), "")
	outs := strings.Split(clean, "\n"+cmdMark+"\n")
	if len(outs) != len(b.script) {
		t.Fatalf("%s:%d: %d command outputs for %d commands (a command printed the marker?)", lesson, b.line, len(outs), len(b.script))
	}
	return outs
}

// check tests one expectation against a block's output.
func check(e expectation, out, work string) error {
	compile := func(s string) (*regexp.Regexp, error) { return regexp.Compile("(?m)" + s) }
	switch e.kind {
	case "expect", "expect-not":
		re, err := compile(e.text)
		if err != nil {
			return err
		}
		if re.MatchString(out) != (e.kind == "expect") {
			return fmt.Errorf("%s %q failed", e.kind, e.text)
		}
	case "expect-lines":
		nstr, rest, _ := strings.Cut(e.text, " ")
		n, err := strconv.Atoi(nstr)
		if err != nil {
			return fmt.Errorf("expect-lines %q: want N REGEX", e.text)
		}
		re, err := regexp.Compile(rest)
		if err != nil {
			return err
		}
		got := 0
		for _, l := range strings.Split(out, "\n") {
			if re.MatchString(l) {
				got++
			}
		}
		if got != n {
			return fmt.Errorf("expect-lines: %d lines match %q, want %d", got, rest, n)
		}
	case "expect-value":
		f := strings.Fields(e.text)
		if len(f) < 3 {
			return fmt.Errorf("expect-value %q: want REGEX OP NUMBER", e.text)
		}
		want, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return fmt.Errorf("expect-value %q: %v", e.text, err)
		}
		op := f[len(f)-2]
		re, err := compile(strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(e.text, f[len(f)-1]), " "+op+" ")))
		if err != nil {
			return err
		}
		m := re.FindStringSubmatch(out)
		if len(m) < 2 {
			return fmt.Errorf("expect-value %q: no match", e.text)
		}
		got, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return fmt.Errorf("expect-value %q: %q is not a number", e.text, m[1])
		}
		ok := map[string]bool{"<": got < want, "<=": got <= want, ">": got > want, ">=": got >= want, "==": got == want}
		if r, known := ok[op]; !known || !r {
			return fmt.Errorf("expect-value %q: got %v", e.text, got)
		}
	case "image":
		return nil // checkImage
	case "expect-file":
		file, pattern, ok := strings.Cut(e.text, ": ")
		if !ok {
			return fmt.Errorf("expect-file %q: want PATH: REGEX", e.text)
		}
		data, err := os.ReadFile(filepath.Join(work, file))
		if err != nil {
			return err
		}
		re, err := compile(pattern)
		if err != nil {
			return err
		}
		if !re.Match(data) {
			return fmt.Errorf("expect-file: %s does not match %q", file, pattern)
		}
	}
	return nil
}

// downLabs takes down any live lab a lesson left up.
func downLabs(binDir, runDir string) {
	states, _ := filepath.Glob(filepath.Join(runDir, "*.json"))
	for _, s := range states {
		name := strings.TrimSuffix(filepath.Base(s), ".json")
		cmd := exec.Command(filepath.Join(binDir, "mrlab"), "down", name)
		cmd.Env = append(os.Environ(), "MRLAB_RUN_DIR="+runDir)
		_ = cmd.Run()
	}
}

// TestParseLesson checks the block syntax on a small example.
func TestParseLesson(t *testing.T) {
	md := "intro\n```console\n$ mrlab sim b2b \\\n    -n 5\nsample output\n$ echo hi\n```\n<!-- expect: hi -->\n" +
		"```console live\n$ sudo mrlab up x\n```\n<!-- expect-value: goodput (\\S+) > 1 -->\n"
	p := filepath.Join(t.TempDir(), "x.md")
	if err := os.WriteFile(p, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	bs, err := parseLesson(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || len(bs[0].script) != 2 || bs[0].script[0] != "mrlab sim b2b -n 5" || bs[0].script[1] != "echo hi" ||
		len(bs[0].expect) != 1 || !bs[1].live || bs[1].expect[0].kind != "expect-value" {
		t.Fatalf("%+v", bs)
	}
	if got := bs[0].shown; len(got) != 2 || len(got[0]) != 1 || got[0][0] != "sample output" || len(got[1]) != 0 || bs[0].shownAt[0] != [2]int{4, 5} {
		t.Fatalf("shown output %q at %v", got, bs[0].shownAt)
	}
	// Exact, but for trailing blanks; a varies pattern and blank runs
	// compare equal in a live block.
	if d := compareShown([]string{"a  1", "b"}, []string{"a  1 ", "b", ""}, nil); d != "" {
		t.Error(d)
	}
	if d := compareShown([]string{"a  1"}, []string{"a  2"}, nil); d == "" {
		t.Error("a changed figure compared equal")
	}
	if d := compareShown([]string{"rate 1.5 Gb/s  ok"}, []string{"rate 12.25 Gb/s ok"}, []*regexp.Regexp{regexp.MustCompile(`[\d.]+ Gb/s`)}); d != "" {
		t.Error(d)
	}
	if d := compareShown([]string{"rate 1.5 Gb/s ok"}, []string{"rate 1.5 Gb/s LAGGING"}, []*regexp.Regexp{regexp.MustCompile(`[\d.]+ Gb/s`)}); d == "" {
		t.Error("a varies pattern hid a word outside it")
	}
	for _, tc := range []struct {
		e   expectation
		out string
		ok  bool
	}{
		{expectation{kind: "expect", text: `^drops\s+1$`}, "x\ndrops   1\n", true},
		{expectation{kind: "expect-not", text: `error`}, "fine", true},
		{expectation{kind: "expect-lines", text: `2 RETX`}, "a RETX\nb\nc RETX\n", true},
		{expectation{kind: "expect-lines", text: `1 RETX`}, "a RETX\nb\nc RETX\n", false},
		{expectation{kind: "expect-value", text: `goodput (\S+) > 90`}, "goodput 95.5", true},
		{expectation{kind: "expect-value", text: `goodput (\S+) > 90`}, "goodput 5.5", false},
	} {
		if err := check(tc.e, tc.out, t.TempDir()); (err == nil) != tc.ok {
			t.Errorf("%+v on %q: %v", tc.e, tc.out, err)
		}
	}
}
