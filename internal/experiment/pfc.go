package experiment

import (
	"github.com/mrlab/mrlab/fabric"
)

// pfcConfig is the lossless reference fabric's PFC: the fabric's default
// thresholds (pause an ingress above 64 KiB waiting, resume at 56 KiB).
var pfcConfig = fabric.PFCConfig{}

// setPFC turns PFC on in opts when the bed asks for it.
func (b bed) setPFC(opts *fabric.BuildOptions) error {
	if b.pfc {
		c := pfcConfig
		opts.PFC = &c
	}
	return nil
}
