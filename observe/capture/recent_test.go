package capture

import "testing"

func TestRecent(t *testing.T) {
	tests := []struct {
		name  string
		puts  []uint64
		want  []uint64 // ids still held
		gone  []uint64 // ids evicted
		total int
	}{
		{"under the bound", []uint64{1, 2}, []uint64{1, 2}, nil, 2},
		{"oldest evicted", []uint64{1, 2, 3, 4}, []uint64{2, 3, 4}, []uint64{1}, 3},
		{"wraps twice", []uint64{1, 2, 3, 4, 5, 6, 7}, []uint64{5, 6, 7}, []uint64{1, 2, 3, 4}, 3},
		{"a put again is no new entry", []uint64{1, 2, 2, 2, 3}, []uint64{1, 2, 3}, nil, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecent[int](3)
			for i, id := range tt.puts {
				r.put(id, i)
			}
			for _, id := range tt.want {
				if _, ok := r.get(id); !ok {
					t.Errorf("id %d evicted, want held", id)
				}
			}
			for _, id := range tt.gone {
				if _, ok := r.get(id); ok {
					t.Errorf("id %d held, want evicted", id)
				}
			}
			if len(r.m) != tt.total || len(r.ring) > 3 {
				t.Errorf("%d entries, ring %d; want %d, at most 3", len(r.m), len(r.ring), tt.total)
			}
		})
	}
}
