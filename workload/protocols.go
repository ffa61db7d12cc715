package workload

import (
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

// DefaultProtocols returns fresh instances of every transport with default
// options: MetaRoCE first (the NIC's default), then RoCEv2.
func DefaultProtocols() []transport.Protocol {
	return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{}), rocev2.NewProtocol(rocev2.Options{})}
}
