package rocev2

import "github.com/mrlab/mrlab/transport"

// copySGL copies between data and the bytes of a scatter-gather list,
// starting off bytes into the list. With toSGL it writes data into local
// memory (which must allow local writes); otherwise it reads the list into
// data. Every byte goes through Memory.Resolve, so a bad key or range is
// refused (StatusLocalProtection) and never touches memory; so is a list
// shorter than off+len(data).
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
		buf, st := mem.Resolve(s.LKey, s.Addr+uint64(off), n, access)
		if st != transport.StatusOK || len(buf) < n {
			return transport.StatusLocalProtection
		}
		if toSGL {
			copy(buf, data[:n])
		} else {
			copy(data[:n], buf)
		}
		data = data[n:]
		off = 0
	}
	if len(data) > 0 {
		return transport.StatusLocalProtection
	}
	return transport.StatusOK
}
