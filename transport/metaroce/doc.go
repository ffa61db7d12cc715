// Package metaroce is mrlab's MetaRoCE transport: a sans-I/O engine for a
// lossy, multipath RDMA transport after Meta's description (see
// docs/metaroce-wire.md for the wire format and shared/seeds for the
// source). It takes received packets and the current time and produces
// packets, one deadline, and completions; it never reads a clock, starts a
// goroutine or touches a socket.
//
// # Shape
//
// One connection carries many independent ordered streams above and many
// paths below, under one congestion controller.
//
//   - Streams. A work request names a stream. Messages get a
//     connection-wide message sequence number (MSN); each data packet says
//     how far back the previous open message of its stream is
//     (stream_prev), so the receiver can complete messages per stream in
//     order without a per-stream table: a stream exists only as the chain
//     of its messages in flight.
//   - Placement. Every data packet carries where it goes (address and key
//     for WRITE and READ responses, a receive match token and offset for
//     SEND) and is placed on arrival, in any order. A connection-wide data
//     sequence number (DSN) per chunk makes placement idempotent and lets a
//     chunk move between paths unambiguously.
//   - Paths. Each path (default 16, up to 256; path p uses NIC port p mod
//     Ports) has its own UDP source port (ECMP entropy), PSN space,
//     scoreboard, window and RTT estimate. A hole in a path's 256-bit SACK
//     vector below a PSN that was sent later and has arrived is loss: paths
//     are FIFO, so that PSN — and only it — is sent again, under the same
//     PSN. A tail loss is caught by a tail-loss probe or the RTO. There is
//     no go-back-N anywhere.
//   - Path health. Repeated losses or a timeout move a path to a new
//     entropy (a new generation, whose PSNs restart at 0) and its
//     outstanding chunks to other paths; TimeoutsBeforeFail timeouts in a
//     row (more under heavy random loss) mark it failed, and it is re-probed on fresh entropies until a
//     probe is answered. A dead link or a whole dead plane is invisible to
//     the application.
//   - Congestion. Per path, DCTCP-style ECN AIMD (g = 1/16; loss without
//     marks does not cut the window). Per receiver NIC, a fair-share
//     allocator divides the NIC's inbound capacity among its active senders
//     by max-min water-filling over their advertised demand; every ACK
//     carries the sender's share, which caps its rate (pacing) and what it
//     keeps in flight.
//
// # Connection life
//
//	        Dial                         Accept(SYN)
//	         |                               |
//	   Connecting --SYN (retried)-->    Established (SYN_ACK retried;
//	         |                           no data until confirmed)
//	SYN_ACK: Established --EST-->         confirmed
//	         |                               |
//	   Close: flush, Closed --CLOSE (retried)--> flush, Closed
//	                   <--CLOSE_ACK--
//	retry exceeded, all paths failed, RNR exceeded: Error (flush, CLOSE)
//
// # Completions
//
// Completions go to Config.Complete, exactly once per work request, per
// stream in MSN (post) order. At the target, a SEND (or WRITE with
// immediate) completes the receive it matched; the Nth receive posted on a
// connection takes the Nth receive-consuming message the peer posted, as
// in RC. Protection errors (bad key, out of range, no permission) are
// NAKed, never written, and reported at both ends: the initiator's request
// completes with StatusRemoteAccess, and the target reports the error on
// the receive the message took or, if it took none, as a completion with
// ID 0.
//
// # Cost
//
// Steady state allocates nothing per packet. State per connection is a
// few small rings sized by what is in flight (messages, chunks, a path's
// outstanding PSNs), not by the number of streams or the connection's age.
package metaroce
