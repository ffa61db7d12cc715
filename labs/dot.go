package labs

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/mrlab/mrlab/fabric"
)

// WriteDot writes the lab's topology as a Graphviz graph: hosts as boxes
// (with their addresses), switches as ellipses grouped in one cluster per
// plane, links as edges labelled with their names. Render it with
// `dot -Tsvg`.
func (l *Lab) WriteDot(w io.Writer) error {
	t := l.topo
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "graph %s {\n", dotID(t.Name))
	// Hosts at the bottom, spines on top: builders list host links host
	// first, and dot ranks an edge's first node above its second.
	b.WriteString("  rankdir=BT;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];\n")
	for _, h := range t.Hosts {
		fmt.Fprintf(b, "  %s [shape=box, label=%s];\n", dotID(h.Name), dotID(h.Name+"\n"+h.Addr.String()))
	}
	for p := 0; p < t.Planes; p++ {
		var members []fabric.Switch
		for _, sw := range t.Switches {
			if sw.Plane == p {
				members = append(members, sw)
			}
		}
		if len(members) == 0 {
			continue
		}
		fmt.Fprintf(b, "  subgraph %s {\n    label=%s;\n", dotID(fmt.Sprintf("cluster_plane%d", p)), dotID(fmt.Sprintf("plane %d", p)))
		for _, sw := range members {
			fmt.Fprintf(b, "    %s [shape=ellipse, label=%s];\n", dotID(sw.Name), dotID(sw.Name+"\n"+sw.Role))
		}
		b.WriteString("  }\n")
	}
	for _, k := range t.Links {
		fmt.Fprintf(b, "  %s -- %s [label=%s, taillabel=%d, headlabel=%d];\n",
			dotID(k.A.Node), dotID(k.B.Node), dotID(k.Name), k.A.Port, k.B.Port)
	}
	b.WriteString("}\n")
	if err := b.Flush(); err != nil {
		return fmt.Errorf("writing dot graph of %s: %w", l.Name, err)
	}
	return nil
}

// dotID quotes s as a Graphviz ID. Newlines become dot's \n line breaks.
func dotID(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
