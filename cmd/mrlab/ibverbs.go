package main

import (
	"fmt"
	"os"

	"github.com/mrlab/mrlab/ibverbs"
)

// ibverbsEnv returns this process's environment with libmrlab-ibverbs.so
// preloaded (built first if needed; MRLAB_IBVERBS_CACHE overrides where).
func ibverbsEnv() ([]string, error) {
	dir := os.Getenv("MRLAB_IBVERBS_CACHE")
	if dir == "" {
		d, err := ibverbs.CacheDir()
		if err != nil {
			return nil, fmt.Errorf("exec --ibverbs: %w", err)
		}
		dir = d
	}
	lib, err := ibverbs.Build(dir)
	if err != nil {
		return nil, fmt.Errorf("exec --ibverbs: %w", err)
	}
	env := os.Environ()
	return append(env, ibverbs.Preload(env, lib)), nil
}
