package transporttest

import (
	"fmt"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// TraceLog is a transport.Tracer that keeps every line, formatted as
// "12.5us conn 3: path 9 entropy 49213 -> 50877 after 3 losses".
type TraceLog struct {
	Lines []string
	// Logf, if set, also receives every line (pass testing.T.Logf to see a
	// failing test's protocol trace).
	Logf func(format string, args ...any)
}

var _ transport.Tracer = (*TraceLog)(nil)

// Tracef implements transport.Tracer.
func (l *TraceLog) Tracef(now sim.Time, conn uint32, format string, args ...any) {
	line := fmt.Sprintf("%v conn %d: ", now, conn) + fmt.Sprintf(format, args...)
	l.Lines = append(l.Lines, line)
	if l.Logf != nil {
		l.Logf("%s", line)
	}
}

// Grep returns the lines that contain sub.
func (l *TraceLog) Grep(sub string) []string {
	var out []string
	for _, s := range l.Lines {
		if strings.Contains(s, sub) {
			out = append(out, s)
		}
	}
	return out
}
