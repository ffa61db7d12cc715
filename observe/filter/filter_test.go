package filter

import (
	"errors"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var all = []Key{Host, Conn, Path, Port, Grep, Re}

// sameRegexp compares regular expressions by their source.
var sameRegexp = cmp.Comparer(func(a, b *regexp.Regexp) bool {
	return a == nil && b == nil || a != nil && b != nil && a.String() == b.String()
})

func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want Terms
	}{
		{"", Terms{}},
		{" , ,", Terms{}},
		{"host=h3", Terms{Hosts: []string{"h3"}}},
		{"host=h3,host=198.18.0.4", Terms{Hosts: []string{"h3", "198.18.0.4"}}},
		{"host=h3, conn=4,path=9,re=a,b", Terms{Hosts: []string{"h3"}, Conns: []uint32{4}, Paths: []int{9}, Re: regexp.MustCompile("a,b")}},
		{"conn=4,conn=7,path=255,port=49213", Terms{Conns: []uint32{4, 7}, Paths: []int{255}, Ports: []uint16{49213}}},
		{`grep=SACK hole, re= entropy \d+`, Terms{Grep: "SACK hole", Re: regexp.MustCompile(` entropy \d+`)}},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in, all...)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, sameRegexp); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		in      string
		allowed []Key
		want    string
	}{
		{"host", all, `bad filter: term "host": want key=value (host, conn, path, port, grep, re)`},
		{"host=", all, `bad filter: term "host=": want key=value (host, conn, path, port, grep, re)`},
		{"conn=-1", all, `bad filter: conn="-1": want a connection id`},
		{"conn=x", all, `bad filter: conn="x": want a connection id`},
		{"path=256", all, `bad filter: path="256": want a path id 0..255`},
		{"path=-1", all, `bad filter: path="-1": want a path id 0..255`},
		{"port=70000", all, `bad filter: port="70000": want a UDP port`},
		{"re=(", all, "bad filter: re=\"(\": error parsing regexp: missing closing ): `(`"},
		{"colour=red", all, `bad filter: unknown key "colour" in "colour=red" (want host, conn, path, port, grep, re)`},
		{"grep=x", []Key{Host, Conn, Path, Port}, `bad filter: unknown key "grep" in "grep=x" (want host, conn, path, port)`},
		{"port=1", []Key{Host, Conn, Path, Grep, Re}, `bad filter: unknown key "port" in "port=1" (want host, conn, path, grep, re)`},
	}
	for _, tc := range cases {
		_, err := Parse(tc.in, tc.allowed...)
		if !errors.Is(err, ErrBadFilter) {
			t.Errorf("Parse(%q) = %v, want ErrBadFilter", tc.in, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("Parse(%q):\n got %s\nwant %s", tc.in, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"host=h3,conn=4,path=9,port=1,grep=x,re=a,b", "re=(", ",,=,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := Parse(s, all...); err != nil && !errors.Is(err, ErrBadFilter) {
			t.Errorf("Parse(%q): %v does not wrap ErrBadFilter", s, err)
		}
	})
}
