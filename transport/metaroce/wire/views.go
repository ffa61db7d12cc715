package wire

// The common header's fields, on every view that starts with it.

// Path returns the path id.
func (d Data) Path() uint8 { return Header(d).Path() }

// Gen returns the path generation.
func (d Data) Gen() uint8 { return Header(d).Gen() }

// PSN returns the per-path sequence number.
func (d Data) PSN() uint32 { return Header(d).PSN() }

// TS returns the sender's timestamp.
func (d Data) TS() uint32 { return Header(d).TS() }

// Path returns the acknowledged path.
func (a Ack) Path() uint8 { return Header(a).Path() }

// Gen returns the acknowledged path's generation.
func (a Ack) Gen() uint8 { return Header(a).Gen() }

// PSN returns the cumulative ACK: every PSN before it was received.
func (a Ack) PSN() uint32 { return Header(a).PSN() }

// Path returns the refused packet's path.
func (n Nak) Path() uint8 { return Header(n).Path() }

// Gen returns the refused packet's path generation.
func (n Nak) Gen() uint8 { return Header(n).Gen() }

// PSN returns the refused packet's PSN.
func (n Nak) PSN() uint32 { return Header(n).PSN() }
