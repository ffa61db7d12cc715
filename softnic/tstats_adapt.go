package softnic

import "github.com/mrlab/mrlab/transport"

// transportStats reads a transport connection's counters by its concrete
// type: transports do not know softnic's types.
func transportStats(tc transport.Conn) TransportStats {
	return TransportStats{}
}
