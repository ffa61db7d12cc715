package metaroce

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
)

type printTracer struct{ n int }

func (p *printTracer) Tracef(now sim.Time, conn uint32, format string, args ...any) {
	if p.n < 60 {
		fmt.Printf("%v conn %d: %s\n", now, conn, fmt.Sprintf(format, args...))
	}
	p.n++
}
