package softnic

// link is a connection's membership in one ready list (a port's data or
// control list).
type link struct {
	prev, next *Conn
	in         bool
}

// readyList is one port's round-robin of connections that may have
// something to send on it (data, or control: see nicPort): an intrusive
// doubly linked list through each connection's links[slot], so adding,
// removing and rotating never allocate and idle connections cost nothing.
type readyList struct {
	slot       int
	head, tail *Conn
	n          int
}

// pushBack adds c at the tail unless it is already listed.
func (l *readyList) pushBack(c *Conn) {
	k := &c.links[l.slot]
	if k.in {
		return
	}
	k.in, k.prev, k.next = true, l.tail, nil
	if l.tail != nil {
		l.tail.links[l.slot].next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

// popFront removes and returns the head, or nil (the list's only way
// out: a connection leaves its list when it is offered a port).
func (l *readyList) popFront() *Conn {
	c := l.head
	if c == nil {
		return nil
	}
	k := &c.links[l.slot]
	l.head = k.next
	if k.next != nil {
		k.next.links[l.slot].prev = nil
	} else {
		l.tail = nil
	}
	k.in, k.prev, k.next = false, nil, nil
	l.n--
	return c
}
