package live

import (
	"context"
	"net/http"
	"testing"
)

// TestMetricsHostHeader: the Prometheus endpoint answers only requests
// addressed to a loopback name or address, so a web page that rebinds its
// DNS name to 127.0.0.1 (DNS rebinding) reads nothing.
func TestMetricsHostHeader(t *testing.T) {
	lab := loadTestLabFile(t, "testdata/mini.yaml")
	eng, err := NewLabEngine(lab, EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var devs []Device
	for range eng.Hosts() {
		devs = append(devs, newPipe())
	}
	l, err := Up(context.Background(), testLabName("hh"), eng, Options{RunDir: t.TempDir(), Devices: devs, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.state.Metrics
	if addr == "" {
		t.Fatal("no metrics endpoint")
	}
	for _, c := range []struct {
		host string
		want int
	}{
		{addr, http.StatusOK},
		{"localhost", http.StatusOK},
		{"localhost:9090", http.StatusOK},
		{"[::1]:9090", http.StatusOK},
		{"127.0.0.2", http.StatusOK},
		{"attacker.example", http.StatusForbidden},
		{"attacker.example:" + addr[len("127.0.0.1:"):], http.StatusForbidden},
		{"localhost.attacker.example", http.StatusForbidden},
		{"198.18.0.1", http.StatusForbidden},
	} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		req.Host = c.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("Host %q: %d, want %d", c.host, resp.StatusCode, c.want)
		}
	}
}
