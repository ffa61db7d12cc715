// Package web is mrlab's web view: a page that shows a lab moving, live
// or as a replay of a recorded sim run (docs/web.md).
//
// The pieces, from the lab to the browser:
//
//   - Probe reads a lab's state on its loop goroutine into a Snapshot:
//     every link direction (counters, queue, up, impairment), switch,
//     host NIC and connection, and for the connections asked about every
//     path with its current route (fabric.Network.FlowPath). It runs only
//     when asked: nothing per packet.
//   - Recorder writes a sim run's snapshots, as changes, with the protocol
//     trace and the faults, to a replay file (format.go,
//     docs/replay-format.md); ReadReplay reads one back into a Replay that
//     rebuilds the state at any frame.
//   - Live follows a running lab through the Lab interface (its control
//     socket, adapted by labs/live.WebLab), polling only while a page
//     watches.
//   - buildFrame turns two snapshots into the Frame the page draws;
//     Server serves the page (assets/, embedded) and the frames as
//     server-sent events on a loopback address.
//
// Layout places the topology by plane and tier, for the page to draw.
package web
