package main

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// presentPages counts the pages wholly inside b that are in the process's
// page tables (bit 63 of their /proc/self/pagemap entries).
func presentPages(t *testing.T, b []byte) (present, pages int) {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := uintptr(os.Getpagesize())
	lo := (uintptr(unsafe.Pointer(unsafe.SliceData(b))) + page - 1) &^ (page - 1)
	hi := (uintptr(unsafe.Pointer(unsafe.SliceData(b))) + uintptr(len(b))) &^ (page - 1)
	var e [8]byte
	for a := lo; a < hi; a += page {
		if _, err := f.ReadAt(e[:], int64(a/page*8)); err != nil {
			t.Fatalf("pagemap at %#x: %v", a, err)
		}
		pages++
		if binary.LittleEndian.Uint64(e[:])&(1<<63) != 0 {
			present++
		}
	}
	return present, pages
}

// exeReadOnlyRSS returns the resident bytes of the executable's mappings
// that are not writable (Rss of each in /proc/self/smaps).
func exeReadOnlyRSS(t *testing.T) int64 {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	in, found := false, false
	for _, l := range strings.Split(string(b), "\n") {
		fs := strings.Fields(l)
		if len(fs) >= 5 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":") {
			in = len(fs) == 6 && fs[5] == exe && !strings.Contains(fs[1], "w")
			found = found || in
			continue
		}
		if v, ok := strings.CutPrefix(l, "Rss:"); ok && in {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("smaps Rss %q: %v", v, err)
			}
			n += kb << 10
		}
	}
	if !found {
		t.Fatalf("no read-only mapping of %s in /proc/self/smaps", exe)
	}
	return n
}

// releaseStartupPages takes the executable's read-only pages out of the
// resident set: of the test binary's (code and tables of every package it
// links, many touched by initialisation and a run) at most half stay
// resident (about 29% here: what runs between the advice and the count
// comes back at once), and the binary keeps working (the pages come back
// on use: a run after it gives the same result as before); none of the
// pages of the fonts gonum/plot's init parsed stays.
func TestReleaseStartupPages(t *testing.T) {
	run := func() string {
		var out, errOut strings.Builder
		if err := newApp(&out, &errOut).Run([]string{"mrlab", "sim", "b2b", "--workload", "write_bw", "--iters", "5", "--size", "64KiB", "--trace-hash", "--json"}); err != nil {
			t.Fatalf("sim: %v\n%s", err, errOut.String())
		}
		return out.String()
	}
	first := run() // it releases the pages itself: read them again
	sum := 0
	for _, b := range startupFonts {
		for i := 0; i < len(b); i += os.Getpagesize() {
			sum += int(b[i])
		}
	}
	fontsBefore, fontPages := 0, 0
	for _, b := range startupFonts {
		p, n := presentPages(t, b)
		fontsBefore, fontPages = fontsBefore+p, fontPages+n
	}
	before := exeReadOnlyRSS(t)
	n, err := releaseStartupPages()
	after := exeReadOnlyRSS(t)
	if err != nil {
		t.Fatal(err)
	}
	fontsAfter := 0
	for _, b := range startupFonts {
		p, _ := presentPages(t, b)
		fontsAfter += p
	}
	t.Logf("font pages present: %d -> %d of %d (byte sum %d)", fontsBefore, fontsAfter, fontPages, sum)
	if fontsBefore == 0 || fontsAfter != 0 {
		t.Errorf("pages of the fonts gonum/plot parses at start-up: %d present before, %d after, of %d; want some, then none", fontsBefore, fontsAfter, fontPages)
	}
	t.Logf("read-only pages of the executable resident: %d -> %d KiB", before>>10, after>>10)
	if n == 0 || after > before/2 {
		t.Errorf("advised %d bytes of mappings: resident %d -> %d KiB, want at most half", n, before>>10, after>>10)
	}
	if again := run(); again != first {
		t.Errorf("a run after releasing the pages differs:\n%s\nbefore:\n%s", again, first)
	}
}
