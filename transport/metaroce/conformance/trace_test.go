package conformance

import (
	"io"
	"os"
)

func traceOrNil(f *os.File) io.Writer {
	if f == nil {
		return nil
	}
	return f
}
