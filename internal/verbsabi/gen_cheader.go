//go:build ignore

// gen_cheader writes mrlab_verbs.h (verbsabi.CHeader) to each path given:
// go generate ./internal/verbsabi.
package main

import (
	"log"
	"os"

	"github.com/mrlab/mrlab/internal/verbsabi"
)

func main() {
	h, err := verbsabi.CHeader()
	if err != nil {
		log.Fatalf("generating mrlab_verbs.h: %v", err)
	}
	for _, p := range os.Args[1:] {
		if err := os.WriteFile(p, h, 0o644); err != nil {
			log.Fatalf("writing mrlab_verbs.h: %v", err)
		}
	}
}
