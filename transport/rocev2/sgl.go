package rocev2

import "github.com/mrlab/mrlab/transport"

// copySGL copies between data and the bytes of a scatter-gather list,
// starting off bytes into the list. With toSGL it writes data into local
// memory (which must allow local writes); otherwise it reads the list into
// data. Every byte goes through the NIC's Memory (data is a slice of the
// packet), so a bad key or range is refused (StatusLocalProtection) and
// never touches memory; so is a list shorter than off+len(data).
func copySGL(mem transport.Memory, sgl []transport.SGE, off int, data []byte, toSGL bool) transport.Status {
	var access transport.Access
	if toSGL {
		access = transport.AccessLocalWrite
	}
	for i := range sgl {
		if len(data) == 0 {
			break
		}
		s := &sgl[i]
		if off >= int(s.Len) {
			off -= int(s.Len)
			continue
		}
		n := min(int(s.Len)-off, len(data))
		var st transport.Status
		if toSGL {
			st = mem.Write(s.LKey, s.Addr+uint64(off), data[:n], access)
		} else {
			st = mem.Read(data[:n], s.LKey, s.Addr+uint64(off), access)
		}
		if st != transport.StatusOK {
			return transport.StatusLocalProtection
		}
		data = data[n:]
		off = 0
	}
	if len(data) > 0 {
		return transport.StatusLocalProtection
	}
	return transport.StatusOK
}
