package workload

import (
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2"
)

// DefaultProtocols returns fresh instances of every transport with default
// options.
func DefaultProtocols() []transport.Protocol {
	return []transport.Protocol{rocev2.NewProtocol(rocev2.Options{})}
}
