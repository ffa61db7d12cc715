package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"codeberg.org/go-fonts/liberation/liberationmonobold"
	"codeberg.org/go-fonts/liberation/liberationmonobolditalic"
	"codeberg.org/go-fonts/liberation/liberationmonoitalic"
	"codeberg.org/go-fonts/liberation/liberationmonoregular"
	"codeberg.org/go-fonts/liberation/liberationsansbold"
	"codeberg.org/go-fonts/liberation/liberationsansbolditalic"
	"codeberg.org/go-fonts/liberation/liberationsansitalic"
	"codeberg.org/go-fonts/liberation/liberationsansregular"
	"codeberg.org/go-fonts/liberation/liberationserifbold"
	"codeberg.org/go-fonts/liberation/liberationserifbolditalic"
	"codeberg.org/go-fonts/liberation/liberationserifitalic"
	"codeberg.org/go-fonts/liberation/liberationserifregular"
)

// releaseStartupPages takes out of the process's resident set the pages of
// the mrlab executable's read-only mappings (its code, read-only data and
// function tables) and returns how many bytes of mappings it advised.
//
// Why: before a command does anything, package initialisation has run the
// init code of ~160 packages and read their tables (gonum/plot's parses 12
// fonts: 2.4 MB of font data), and with the kernel mapping file pages 64
// KiB around each fault, `mrlab version` peaks at about 19 MiB, most of it
// pages of the binary that a simulation never touches again. Released
// before a run (sim, bench), they are no longer counted in its RSS; the
// pages the run does use come back from the page cache on first touch (a
// minor fault, no I/O: the pages stay cached), and are counted again.
//
// MADV_DONTNEED on a private mapping that is not writable can only drop
// pages identical to the file's, so no state is lost. Writable mappings
// (initialised data) are left alone, but for the whole pages of the font
// files gonum/plot's initialisation parses (startupFonts): a []byte
// variable's data is in the writable data segment, and those 2.2 MiB,
// never written by anyone, are otherwise resident for the whole run.
// Best effort: an error reading the maps is returned and nothing else
// changes.
func releaseStartupPages() (int64, error) {
	n, err := releaseMapped()
	for _, b := range startupFonts {
		n += releaseWholePages(b)
	}
	return n, err
}

// startupFonts are the 12 Liberation fonts gonum.org/v1/plot's init
// parses (font.DefaultCache.Add(liberation.Collection())) in every mrlab
// process: read-only data by contract, in a writable segment.
var startupFonts = [][]byte{
	liberationmonobold.TTF, liberationmonobolditalic.TTF, liberationmonoitalic.TTF, liberationmonoregular.TTF,
	liberationsansbold.TTF, liberationsansbolditalic.TTF, liberationsansitalic.TTF, liberationsansregular.TTF,
	liberationserifbold.TTF, liberationserifbolditalic.TTF, liberationserifitalic.TTF, liberationserifregular.TTF,
}

// releaseWholePages advises away the pages that lie wholly inside b (b is
// never written) and returns their bytes.
func releaseWholePages(b []byte) int64 {
	if len(b) == 0 {
		return 0
	}
	page := uintptr(os.Getpagesize())
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	lo = (lo + page - 1) &^ (page - 1)
	hi &^= page - 1
	if hi <= lo {
		return 0
	}
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, syscall.MADV_DONTNEED); e != 0 {
		return 0
	}
	return int64(hi - lo)
}

// releaseMapped advises away the executable's mappings that are not
// writable and returns their bytes.
func releaseMapped() (int64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("releasing start-up pages: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("releasing start-up pages: %w", err)
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fs := strings.Fields(sc.Text())
		if len(fs) != 6 || fs[5] != exe || !strings.HasPrefix(fs[1], "r") || strings.Contains(fs[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || b <= a {
			return n, fmt.Errorf("releasing start-up pages: /proc/self/maps line %q", sc.Text())
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(a), uintptr(b-a), syscall.MADV_DONTNEED); e != 0 {
			return n, fmt.Errorf("releasing start-up pages: madvise %s: %w", fs[0], e)
		}
		if os.Getenv("ZZRAND") != "" {
			syscall.Syscall(syscall.SYS_MADVISE, uintptr(a), uintptr(b-a), 1)
		}
		n += int64(b - a)
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("releasing start-up pages: reading /proc/self/maps: %w", err)
	}
	return n, nil
}
