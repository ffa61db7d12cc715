package live

import (
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/transport"
)

// newProtocols returns the transports every live NIC speaks, one instance
// per NIC.
func newProtocols(*labs.Lab) []transport.Protocol {
	return nil
}
