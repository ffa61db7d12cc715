package verbsabi

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestCHeaderUpToDate: the checked-in C headers are what the Go package
// generates, so the C side cannot drift from the Go side.
func TestCHeaderUpToDate(t *testing.T) {
	want, err := CHeader()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range CHeaderPaths() {
		got, err := os.ReadFile(filepath.Join("..", "..", p))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what internal/verbsabi generates: run go generate ./internal/verbsabi", p)
		}
	}
}

// marker sets v (a field the encoders write) to a value whose bytes are
// all distinct and nonzero, and returns those bytes as the encoder lays
// them out.
func marker(t *testing.T, v reflect.Value) []byte {
	t.Helper()
	le := binary.LittleEndian
	switch v.Kind() {
	case reflect.Uint8:
		v.SetUint(0xa1)
		return []byte{0xa1}
	case reflect.Uint16:
		v.SetUint(0xa2b3)
		return le.AppendUint16(nil, 0xa2b3)
	case reflect.Uint32:
		v.SetUint(0xa1b2c3d4)
		return le.AppendUint32(nil, 0xa1b2c3d4)
	case reflect.Uint64:
		v.SetUint(0xa1b2c3d4e5f60718)
		return le.AppendUint64(nil, 0xa1b2c3d4e5f60718)
	case reflect.Bool:
		v.SetBool(true)
		return []byte{1}
	case reflect.String:
		v.SetString("mrlab-x")
		return []byte("mrlab-x")
	case reflect.Array:
		b := []byte{0xa1, 0xb2, 0xc3, 0xd4}
		reflect.Copy(v, reflect.ValueOf(b))
		return b
	}
	t.Fatalf("no marker for %v", v.Type())
	return nil
}

// TestCHeaderLayout: every C member the header declares lies at the
// offset where the Go encoder writes its field. Each field in turn gets a
// marker value; the encoded message (or entry) must hold its bytes at the
// member's C offset.
func TestCHeaderLayout(t *testing.T) {
	for i := range cStructs {
		s := &cStructs[i]
		offs, _ := s.layout()
		for _, bd := range s.bindings {
			for j, fl := range s.fields {
				goName, ok := bd.fields[fl.name]
				if !ok {
					if !strings.HasPrefix(fl.name, "reserved") && bd.kind != "wqe" {
						t.Errorf("%s.%s (%s %v) is bound to no Go field", s.name, fl.name, bd.kind, bd.op)
					}
					continue
				}
				if goName == "" {
					continue
				}
				var enc []byte
				var want []byte
				set := func(x any) {
					v := reflect.ValueOf(x).Elem()
					for _, n := range strings.Split(goName, ".") {
						v = v.FieldByName(n)
					}
					if !v.IsValid() {
						t.Fatalf("%s.%s: no Go field %s", s.name, fl.name, goName)
					}
					want = marker(t, v)
				}
				switch bd.kind {
				case "req":
					r := Request{Op: bd.op}
					set(&r)
					enc = AppendRequest(nil, &r)[HeaderSize:]
				case "reply":
					r := Reply{Op: bd.op}
					set(&r)
					enc = AppendReply(nil, &r)[HeaderSize:]
				case "wqe":
					var w WQE
					set(&w)
					enc = make([]byte, WQESize)
					PutWQE(enc, &w)
				case "sge":
					var w WQE
					set(&w.SGL[0])
					enc = make([]byte, WQESize)
					PutWQE(enc, &w)
					enc = enc[32:] // mv_wqe.sge[0]
				case "cqe":
					var c CQE
					set(&c)
					enc = make([]byte, CQESize)
					PutCQE(enc, &c)
				case "hdr":
					var h struct {
						Op     Op
						Seq    uint32
						Status Code
						Len    uint32
					}
					set(&h)
					enc = AppendHeader(nil, h.Op, h.Seq, h.Status, int(h.Len))
				}
				if got := enc[offs[j]:][:len(want)]; !bytes.Equal(got, want) {
					t.Errorf("%s.%s at C offset %d: the Go encoder of %s %v puts %x there, want %s's %x",
						s.name, fl.name, offs[j], bd.kind, bd.op, got, goName, want)
				}
			}
		}
	}
}
