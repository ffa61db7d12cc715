package ibverbs

import (
	"debug/elf"
	"os"
	"testing"

	"github.com/mrlab/mrlab/internal/testenv"
)

// TestBuild compiles the embedded sources with cc and checks that the
// library exports the entry points programs bind to under rdma-core's
// symbol versions (a wrong or missing version and the program's call
// would go to the real libibverbs, which finds no device), and that a
// second Build reuses the first.
func TestBuild(t *testing.T) {
	testenv.RequireCommand(t, "cc")
	testenv.RequireFile(t, Header, "libibverbs-dev")
	dir := t.TempDir()
	lib, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			got[s.Name] = s.Version
		}
	}
	for name, ver := range map[string]string{
		"ibv_get_device_list": "IBVERBS_1.1", "ibv_open_device": "IBVERBS_1.1", "ibv_reg_mr": "IBVERBS_1.1",
		"ibv_reg_mr_iova2": "IBVERBS_1.8", "ibv_qp_to_qp_ex": "IBVERBS_1.6", "_ibv_query_gid_ex": "IBVERBS_1.11",
		"ibv_create_comp_channel": "IBVERBS_1.0", "ibv_query_gid_type": "IBVERBS_PRIVATE_34",
		"ibv_get_cq_event": "IBVERBS_1.1", "ibv_modify_qp": "IBVERBS_1.1", "ibv_query_port": "IBVERBS_1.1",
	} {
		if got[name] != ver {
			t.Errorf("%s exported at version %q, want %q", name, got[name], ver)
		}
	}
	for name := range got {
		if len(name) > 4 && name[:4] == "mrv_" {
			t.Errorf("internal symbol %s is exported", name)
		}
	}
	st, _ := os.Stat(lib)
	again, err := Build(dir)
	if err != nil || again != lib {
		t.Fatalf("second build: %q, %v", again, err)
	}
	if st2, _ := os.Stat(again); !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("second build rebuilt the library")
	}
}

func TestPreload(t *testing.T) {
	tests := []struct {
		env  []string
		want string
	}{
		{[]string{"PATH=/bin"}, "LD_PRELOAD=/l.so"},
		{[]string{"LD_PRELOAD=/other.so", "HOME=/"}, "LD_PRELOAD=/l.so:/other.so"},
	}
	for _, tc := range tests {
		if got := Preload(tc.env, "/l.so"); got != tc.want {
			t.Errorf("Preload(%v) = %q, want %q", tc.env, got, tc.want)
		}
	}
}
