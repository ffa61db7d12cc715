package experiment

import (
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

// rocev2Options are the RoCEv2 baseline's settings in every experiment.
// The local ACK timeout is 4.096 us x 2^5 = 131 us instead of the HCA
// default of about 67 ms: far more aggressive than deployed RoCE, so
// that the figures show what go-back-N costs rather than how long a timer
// is. Everything else (window, ACK coalescing, DCQCN, retry_cnt 7) is the
// transport's default.
var rocev2Options = rocev2.Options{Timeout: 5}

// rocev2Timeout describes rocev2Options for reports.
const rocev2Timeout = "RoCEv2 local ACK timeout 131 us (IB exponent 5; the HCA default is 67 ms), retry_cnt 7, DCQCN on"

// experimentProtocols returns fresh transports for one NIC: MetaRoCE with
// its defaults and RoCEv2 with rocev2Options.
func experimentProtocols() []transport.Protocol {
	return append(metaroceProtocols(), rocev2.NewProtocol(rocev2Options))
}

// metaroceProtocols returns MetaRoCE with its default options (16 paths
// per connection, receiver fair-share hints on).
func metaroceProtocols() []transport.Protocol { return metaroceWithPaths(0) }

// metaroceWithPaths returns MetaRoCE with n paths per connection (0: the
// default).
func metaroceWithPaths(n int) []transport.Protocol {
	return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{Paths: n})}
}
