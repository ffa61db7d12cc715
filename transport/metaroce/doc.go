// Package metaroce is mrlab's MetaRoCE transport: a sans-I/O engine for a
// lossy, multipath RDMA transport after Meta's description (see
// docs/metaroce-wire.md for the wire format and shared/seeds for the
// source). It takes received packets and the current time and produces
// packets, one deadline, and completions; it never reads a clock, starts a
// goroutine or touches a socket.
//
// Every rule below holds the same way at any link rate and over any path
// length: the engine's times come from RTTs it measures and from the NIC's
// line rate, and no rule switches on at a measured threshold. The wire
// specification states the same rules; each file's comments say how.
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
//     order without a per-stream table.
//   - Placement. Every data packet carries where it goes (address and key
//     for WRITE and READ responses, a receive match token and offset for
//     SEND) and is placed on arrival, in any order. A connection-wide data
//     sequence number (DSN) per chunk makes placement idempotent and lets a
//     chunk move between paths unambiguously. Payload bytes move in
//     exactly two functions (payload.go).
//   - Paths. Each path (default 8 per NIC port, at least 16, up to 256;
//     path p uses NIC port p mod Ports) has its own UDP source port (ECMP entropy), PSN space and
//     scoreboard (scoreboard.go), RTT estimate, ECN signal and share of
//     the connection's window.
//
// # Sending
//
// A new chunk goes out when the connection's window W and pacing rate R
// allow (cc.go), on the path whose turn it is on the port asking. Only
// the first k usable paths of each plane take new data: k is enough that
// each carries AckEvery packets of min(W, bytes in flight + bytes not yet
// sent), at least 1 and at most the plane's paths (path.go). A connection
// whose window is a few packets (a sliver of a busy receiver, a short
// message) so uses few paths, each with packets behind a loss to show it
// in its SACK and to draw ACKs of its own; one with a large window sprays
// over them all. The paths beyond k (spare) keep what they have
// outstanding, with its timers, and take nothing new. The active paths
// take turns in a weighted round robin, a path's weight being 1 minus its
// CE-marked fraction, and each path takes a run of packets in a row, as
// many as keep about two packets per path in flight per round trip (at
// most a quarter of the window), so that losses show in SACKs rather than
// timers. A path never holds more than its share of W (or its run), in
// whole packets (shares.go): in a dialer's first flight, which has no
// headroom, the flight's packets are apportioned to the paths by weight,
// largest remainders first (ties to the lower path), so the shares sum to
// the flight; afterwards each share is rounded down, which W's headroom
// covers (W's packets handed out whole cost a 2:1 oversubscribed uplink
// and a many-peer all-to-all, see shares.go).
//
// # Congestion control
//
// ECN is the congestion signal, loss never is (cc.go). The sender paces at
// R = min(line rate, receiver's hint) x m, m being DCTCP's window in rate
// form over all the connection's packets (cut by 1 - alpha/2 at most once
// per round on marks, alpha starting at 1/4, grown back by 1/16 per round
// without), and keeps at
// most W = 5/4 x R x (base RTT + the peer's ACK delay) / (1 - measured
// loss) + 2 full packets in flight. Before the receiver's first ACK a
// dialer keeps in flight the first flight its SYN_ACK allows: the
// acceptor grants a first share (first_share: the new sender's fair share,
// at most the capacity not granted to dialers whose first data has not
// arrived, so simultaneous dialers' grants add up to at most its capacity)
// and the dialer sends up to that share x the first ACK's round trip (the
// handshake RTT plus initialSerializations full-size packets at the line
// rate: the handshake's small packets show no data packet's
// serialization per hop; a late, held flight keeps the handshake RTT);
// one packet
// when the share is 0 or its first data
// packet went more than two handshake RTTs after the SYN_ACK (judged
// when it went, not as the flight goes), the acceptor's grant having
// lapsed with its presumption (with Options.HoldFirstGrant, off by
// default, the grant holds until the first data arrives and the flight
// goes whenever it does). What of it is still in flight at the first ACK is a
// credit over W until it leaves flight (acknowledged or lost). Its losses, all found within one
// round trip, count in the sender's demand and move the repath test's
// typical rate at once, so they neither lower its share nor move its
// paths. The receiver (ratehint.go) divides its capacity among its active
// senders by max-min water-filling over their demands and puts each
// sender's share in every ACK. A sender's last packet (nothing queued
// after it, nothing to send again) states a demand of 0 and ends its
// activity at once: its share goes to the others, and it is offered what
// one more sender would get (a sender's share otherwise outlives its last
// packet by four of its packet intervals: 340 us for 250 senders per
// 100G receiver, while the last of them stayed paced at C/250). When it is busy (its senders ask for all of
// its capacity and their packets arrive at the rate it hands out) it
// answers CE marks itself, by lowering every share alike (DCTCP on its
// arrivals, no second cut while the marked fraction falls period over
// period, handing out the whole capacity again at once when a block of
// arrivals comes unmarked and slower than a queue would deliver them (a
// NIC of one port): the
// queue the cuts were for has drained; else recovering as DCQCN does
// toward the share before the cut), and
// tells the senders so (ACK flag BUSY). Total in flight is W whatever the
// number of paths.
//
// # Loss recovery
//
// A hole in a path's SACK vector below a PSN sent later that has arrived is
// loss, not reordering (paths are FIFO): that PSN is sent again at once,
// under the same PSN. Across paths (lossdetect.go, RACK's rule): a packet
// is lost when one sent after it on any path has arrived and it has been
// out longer than that packet's round trip plus a reordering window made
// of the paths' RTT spread, four RTT variations and the peer's ACK delay
// (widened after a loss found spurious: its ACK came before the resend
// went, or echoed a time before it; narrowed back after repairs), plus the
// measured lateness: how much later than a later-sent packet's round trip
// a packet came, the largest over the paths, halved every 16 RTTs, so
// queues that differ between paths are not taken for loss. A path with
// one packet in flight needs no timer to find its loss. An
// ACK of a chunk's earlier transmission (one a tail-loss probe or a move
// sent again) settles the chunk. A path whose ACKs stop gets a tail-loss probe one
// PTO (RTT + 4 x variation + the peer's ACK delay + the lateness) after its last
// transmission or progress; more probes follow while chance can explain
// their loss; only then a timeout, which moves the path's chunks to paths
// that deliver (last ACK progress within their PTO of the connection's
// latest, not of now: when the moved chunks are all a connection has
// outstanding no path has anything to deliver, and judged against now
// they went from one dead path to the next; transmit.go) and the path to
// a new entropy (probe.go). Unanswered
// probes move the path's chunks early (the path is suspect) only with
// evidence against the route: as many probes unanswered as the chance
// rule's tail-probe count (one loss-free) and another path delivered a
// round trip after the latest left, or the path's packets sent since its
// last progress were found lost across paths; or one probe unanswered
// and nothing else outstanding on a path that still answers, nor left to
// send. When every path's ACKs are late alike, the peer is slow, not the
// route; when a probe round trip fails by chance as often as not (47%
// loss end to end on six links at 10%), one unanswered probe says
// nothing: half the chunks moved on it had arrived and went twice. A chunk the
// receiver refused with an RNR NAK is neither lost nor a tail: while
// chunks wait out their RNR back-off, a path holding no chunk (only
// fillers and probes) arms no probe and no timeout; it probes again a PTO
// after the last back-off ends (rnrWaiting, nak.go). A NAK answers its
// packet at once and echoes its ts: it is an RTT sample like an ACK's, so
// a retry's NAK is not later than the PTO. A chunk lost by
// SACK more than MaxRetries times (more under measured loss) fails the
// connection; a connection whose paths have all failed for
// AllFailedTimeout gives up. There is no go-back-N anywhere.
//
// The "chance" rule: wherever a count of failures decides something (tail
// probes before a timeout or a move, timeouts before a path fails, losses
// before a chunk fails), the count is the option's value or, if more, the smallest
// count whose all-fail probability at the connection's measured loss rate
// is below a small bound (1e-3, 1e-4, 1e-9). Loss-free it is the option;
// under heavy loss it grows just enough that random loss alone does not
// trip it.
//
// Proactive copies (redundancy.go): a connection whose measured loss rate
// is at least 1e-3 (one transmission fails the chance bound) and that has
// nothing else to send, with its chunks in flight plus the copies not yet
// settled below its share's bandwidth-delay product (R x base RTT), sends
// its oldest outstanding chunk not yet copied once more, under a new PSN
// on another path that delivers. The copy takes the original's place (the
// old PSN becomes a filler, as after a tail-loss probe), so whichever copy
// is acknowledged first settles the chunk and a lost filler is closed by
// a bare probe. Not while congestion control holds R below the share,
// the receiver is BUSY, or a path the connection used is out of service.
// Copies go through the pacer at R and are not in the
// demand the receiver allocates by, so they spend only the connection's
// own unused share. A copy carries no RETX; the receiver's loss estimate
// counts a lost copy by its filler's RETX probe, so it stays the
// per-packet loss and the ACK redundancy rule does not feed on copies.
// Loss-free nothing changes.
//
// # Path health
//
// A path whose losses on its current entropy are too many to be chance at
// the typical path's loss rate (the median over its paths, recomputed once
// per smoothed RTT or when the connection's loss rate moves by 2x; a
// Chernoff bound on the binomial tail below RepathConfidence) moves to a new entropy at once, its chunks to paths
// that deliver; one whose CE-marked fraction stays above
// RepathMarkFraction for RepathMarkRounds rounds while fewer than half of
// the paths do drains and moves. Left entropies are remembered (the last
// eight, whatever the reason they were left, re-probing included), and a
// new entropy is never a remembered one, so a gray link is
// left for good while a uniformly lossy fabric moves no path.
//
// The NIC tells a connection when one of its own ports goes down or comes
// back (SetPortsUp, portstate.go): the paths on a port that is down take
// no new data, their chunks move at once to paths that deliver, and they
// send nothing and time nothing out until the port is back; then they
// probe and return to service when a probe is answered.
//
// # ACKs
//
// One ACK answers data that arrived on any of the peer's paths: its fixed
// part describes one path and records follow for the others it owes
// (ackgen.go). The receiver sends one per AckEvery data packets or
// AckDelay after the first, and at once on a hole, a hole filled, a
// duplicate, a probe, a message completely placed, or a move of the
// sender's share by more than a tenth. Each arrival is carried by two
// ACKs, or more under loss (the chance rule at 1e-3, at the loss rate the
// receiver measures: the fraction of arrivals that are retransmissions;
// at most 10), and records are cumulative, so lost ACKs lose nothing: a
// path whose state no ACK delivered would look lost to the sender's loss
// detection across paths, and its packets would go twice. Under measured
// loss (more than two ACKs) an ACK that leaves paths owed is followed a
// packet time later by one extra copy, which does not wait for later
// arrivals. The NIC sends ACKs, NAKs and handshake messages ahead of
// every connection's data (TransmitControl), so an ACK never waits for a
// round of other connections' data on its port; it asks only when the
// connection says it has some (ControlPending), and asks a connection
// that has never sent for data only then too (TransmitPending).
//
// # Connection life
//
//	        Dial                         Accept(SYN)
//	         |                               |
//	   Connecting --SYN (retried)-->    Established (SYN_ACK retried;
//	         |                           no data until confirmed; the
//	         |                           NIC holds it half-open, bounded)
//	SYN_ACK: Established --EST-->         confirmed (HandshakeDone: to
//	                                      the listener)
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
// ID 0. A remote access error is fatal at both ends, as in RC: the
// target's connection errs after its NAK, the initiator's on receiving it
// (its other requests flushed), so each guess at a key costs a handshake.
// A dead link or a whole dead plane is invisible to the application.
//
// # Parts
//
// Conn composes parts that hold their own state and are tested alone,
// each with a table test in its own file:
//   - pathRTT and rttEstimator (rtt.go, rtt_test.go): a path's RFC 6298
//     estimate, and the connection's over all paths with the latest
//     sample and the base RTT; timer RTT and the PTO's base from both.
//   - dctcp (cc.go, cc_test.go): the connection's rate controller;
//     it takes (now, ACK sample: packets acknowledged, received and
//     marked, the RTT) and gives the rate R and the window W.
//   - rackState, reoAdapt and pathLate (lossdetect.go,
//     lossdetect_test.go): the RACK record (a delivery, a verdict on one
//     transmission, a lateness sample), the reordering window's scale,
//     and a path's measured lateness with its decay.
//
// Conn keeps what joins them to the connection and its paths: which path
// a sample belongs to and the sample filter, the per-path mark EWMA and
// shares, the inputs R and W are computed from (the hint, the base RTT
// with the peer's ACK delay, the loss rate), the timers and the trace.
//
// # Cost
//
// Steady state allocates nothing per packet. State per connection is a
// few small rings sized by what is in flight (messages, chunks, a path's
// outstanding PSNs), not by the number of streams or the connection's age.
package metaroce
