// Package transporttest is an in-memory harness for mrlab's transport
// engines (MetaRoCE and RoCEv2): hosts that each own a transport.Protocol and
// a Memory, joined by a small star network of FIFO links that runs on a
// sim.Loop.
//
// The network is deliberately simple but honest about what transports care
// about:
//
//   - Real bytes: every packet is framed as IPv4/UDP (ECN in the IPv4 header,
//     the path entropy in the UDP source port), so a protocol that seals an
//     integrity check over the IP packet (RoCEv2's ICRC, see IPSealer) works
//     unchanged.
//   - Planes: a host has Config.Ports ports; port q of every host hangs off
//     plane q's switch. A packet from host a to host b on port q crosses a's
//     uplink and b's downlink on plane q.
//   - Paths: a route is (source host, destination host, port, UDP source
//     port). Every route gets a fixed extra delay drawn from [0, PathSkew),
//     so different paths reorder against each other while each path stays
//     FIFO, as one route through a real fabric does.
//   - Bottleneck: a host's downlink is a drop-tail queue shared by every
//     sender, with optional ECN CE marking above a threshold, so N-to-1
//     incast builds a real queue.
//   - Faults: seeded random loss, duplication and reordering (the latter
//     breaks per-path FIFO on purpose), links and whole planes going down,
//     and a Filter hook that sees every packet as it leaves its host and may
//     drop, duplicate or CE-mark it — scripted tests ("drop the 3rd data
//     packet on path 5") are written as filters.
//
// Hosts play the NIC: they poll Transmit on a port whenever its uplink is
// idle, deliver received payloads through Demux/Accept/Receive, and re-arm
// one timer per connection at its Deadline. Everything is deterministic for a
// given Config.Seed.
//
// Nothing here is safe for concurrent use; the sim.Loop's goroutine owns it.
package transporttest
