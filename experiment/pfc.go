package experiment

import (
	"errors"

	"github.com/mrlab/mrlab/fabric"
)

// errNoPFC is returned when a bed asks for PFC and the fabric has no PFC
// model.
var errNoPFC = errors.New("the fabric has no PFC model")

// pfcAvailable reports whether the fabric can run lossless with PFC.
func pfcAvailable() bool { return false }

// setPFC turns PFC on in opts when the bed asks for it.
func (b bed) setPFC(opts *fabric.BuildOptions) error {
	if b.pfc {
		return errNoPFC
	}
	return nil
}
