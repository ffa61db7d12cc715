// Package ibverbs builds libmrlab-ibverbs.so, the libibverbs-compatible
// library in this directory (README.md), from the C sources embedded in
// the mrlab binary, so `mrlab exec --ibverbs` needs only cc and
// libibverbs-dev on the machine, and no source tree.
package ibverbs

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

//go:embed src/*.c src/*.h src/libibverbs.map
var sources embed.FS

// LibName is the library's file name.
const LibName = "libmrlab-ibverbs.so"

// Header is the rdma-core header the sources compile against: its struct
// layouts are the ABI the library must match.
const Header = "/usr/include/infiniband/verbs.h"

// Sources returns the C source files' names, in build order.
func Sources() []string {
	names, _ := fs.Glob(sources, "src/*.c")
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	sort.Strings(names)
	return names
}

// Hash returns a digest of every embedded source: the build's identity.
func Hash() string {
	h := sha256.New()
	_ = fs.WalkDir(sources, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := sources.ReadFile(p)
		fmt.Fprintf(h, "%s %d\n", p, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Build returns the path of the library built from the embedded sources,
// under cacheDir/HASH, building it with cc first if it is not there. cc
// and libibverbs-dev's header must be installed.
func Build(cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, Hash())
	lib := filepath.Join(dir, LibName)
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	if _, err := os.Stat(Header); err != nil {
		return "", fmt.Errorf("building %s: %s is missing: install libibverbs-dev (apt-get install libibverbs-dev)", LibName, Header)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("building %s: no C compiler (cc) on PATH: install gcc", LibName)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("building %s: %w", LibName, err)
	}
	src, err := os.MkdirTemp(dir, "src")
	if err != nil {
		return "", fmt.Errorf("building %s: %w", LibName, err)
	}
	defer os.RemoveAll(src)
	err = fs.WalkDir(sources, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := sources.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(src, filepath.Base(p)), b, 0o644)
	})
	if err != nil {
		return "", fmt.Errorf("building %s: writing sources: %w", LibName, err)
	}
	tmp := filepath.Join(src, LibName)
	args := append([]string{"-O2", "-g", "-Wall", "-std=gnu11", "-fPIC", "-shared",
		"-Wl,--version-script=libibverbs.map", "-o", tmp}, Sources()...)
	args = append(args, "-lpthread")
	cmd := exec.Command(cc, args...)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: cc: %v\n%s", LibName, err, out)
	}
	// Rename is atomic: a concurrent build leaves one whole library.
	if err := os.Rename(tmp, lib); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("building %s: %w", LibName, err)
	}
	return lib, nil
}

// CacheDir is where Build keeps libraries by default: the user's cache
// directory (XDG_CACHE_HOME or ~/.cache) under mrlab/ibverbs.
func CacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding a cache directory for %s: %w", LibName, err)
	}
	return filepath.Join(d, "mrlab", "ibverbs"), nil
}

// Preload returns the environment entry that puts lib in front of the
// libraries a program loads, keeping an LD_PRELOAD already in env.
func Preload(env []string, lib string) string {
	v := lib
	for _, e := range env {
		if len(e) > len("LD_PRELOAD=") && e[:len("LD_PRELOAD=")] == "LD_PRELOAD=" {
			v = lib + ":" + e[len("LD_PRELOAD="):]
		}
	}
	return "LD_PRELOAD=" + v
}
