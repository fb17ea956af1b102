package security

import "testing"

func TestCheckAddr(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:29400", true},
		{"[::1]:29400", true},
		{"head.example:29400", true},
		{"unix:///run/muster/agent.sock", true},
		{"127.0.0.1", false},
		{":29400", false},
		{"http://127.0.0.1:29400", false},
		{"127.0.0.1:0", false},
		{"127.0.0.1:99999", false},
		{"127.0.0.1:http", false},
		{"unix://relative.sock", false},
	}
	for _, tt := range tests {
		if err := CheckAddr(tt.addr); (err == nil) != tt.ok {
			t.Errorf("CheckAddr(%q) = %v, want ok=%v", tt.addr, err, tt.ok)
		}
	}
}
