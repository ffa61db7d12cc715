package rocev2

// ConnStats are a QP's counters.
type ConnStats struct {
	// TxPackets and TxBytes count every packet Transmit produced (payload
	// bytes, ICRC included); RxPackets and RxBytes every decodable one
	// Receive got.
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
	// DataPackets counts request packets sent (WRITE, SEND, READ request),
	// first transmissions and retransmissions; Retransmitted counts the
	// ones whose PSN had been sent before.
	DataPackets   uint64
	Retransmitted uint64
	// Rewinds counts go-back-N restarts (NAK, timeout, RNR, missing READ
	// response); Timeouts counts local ACK timeouts.
	Rewinds  uint64
	Timeouts uint64
	// ACKs and NAKs. NAKs are sequence-error and fatal NAKs; RNR NAKs are
	// counted apart.
	AcksSent, AcksReceived       uint64
	NAKsSent, NAKsReceived       uint64
	RNRNAKsSent, RNRNAKsReceived uint64
	ReadResponsesSent            uint64
	ReadResponsesReceived        uint64
	DuplicateResponses           uint64
	// Responder side: Duplicates are requests with a PSN already placed
	// (re-ACKed); OutOfSequence are packets past a gap (dropped; the first
	// of an episode makes a NAK). Requester side, OutOfSequence also counts
	// READ responses past a missing one.
	Duplicates    uint64
	OutOfSequence uint64
	// OutOfOrderKept counts packets past a gap that selective repeat kept
	// (placed once the gap filled); SelectiveResends the requester's
	// resends of single PSNs a NAK or a timeout asked for.
	OutOfOrderKept   uint64
	SelectiveResends uint64
	// Malformed counts undecodable or misdirected payloads and responses
	// that match nothing outstanding; Dropped counts valid packets the QP's
	// state refused (not yet connected, closed, in error).
	Malformed uint64
	Dropped   uint64
	// DCQCN: CE-marked packets received, CNPs sent and received, rate cuts.
	CEReceived   uint64
	CNPsSent     uint64
	CNPsReceived uint64
	RateCuts     uint64
	// Rate is the current DCQCN rate in bits per second (the line rate
	// when unthrottled); Alpha is DCQCN's congestion estimate.
	Rate  float64
	Alpha float64
	// Window is the requester's packet window.
	Window int
	// CM messages sent and CM retries.
	CMSent, CMRetries uint64
}
