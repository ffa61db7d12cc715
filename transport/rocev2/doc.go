// Package rocev2 is mrlab's RoCEv2 baseline: a sans-I/O Reliable Connection
// queue pair that speaks the real RoCEv2 wire format (BTH/RETH/AETH/ImmDt on
// UDP 4791 with the ICRC trailer, see package ib) and behaves like an RC QP
// of a commodity RDMA NIC: one path per QP (a fixed UDP source port),
// in-order placement at the responder, one PSN-sequence-error NAK per loss
// episode, go-back-N retransmission on that NAK and on the local ACK timeout,
// RNR NAKs, READ responses, and DCQCN rate control as an option.
//
// It exists so MetaRoCE can be compared with what it replaces: on a lossy
// fabric this engine collapses the way real RoCE does.
//
// A Conn never reads a clock, starts a goroutine or touches a socket: the
// NIC (package softnic) passes the current time into every call, frames the
// payloads Transmit writes into IPv4/UDP, seals them with SealICRC, and
// re-arms one timer at Deadline. docs/rocev2-baseline.md says what is
// modelled and what is not.
package rocev2
