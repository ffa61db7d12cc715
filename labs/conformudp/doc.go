// Package conformudp runs the MetaRoCE conformance suite
// (transport/metaroce/conformance) over real UDP sockets: the udp target,
// the tester's side that sends the scripts' packets to an implementation
// under test and drives its application side over the control channel,
// and the Agent, which serves mrlab's own engine as such an implementation.
// It holds the suite's live I/O (sockets, the wall clock, goroutines) so
// that transport/ stays sans-I/O.
package conformudp
