package security

import (
	"testing"
)

func TestCheckListen(t *testing.T) {
	for _, tt := range []struct {
		addr, token, cert string
		ok                bool
	}{
		{"127.0.0.1:0", "", "", true},
		{"[::1]:0", "", "", true},
		{"localhost:29400", "", "", true},
		{"0.0.0.0:29400", "", "", false},
		{"10.1.2.3:29400", "", "", false},
		// The token must not cross the network in clear text.
		{"0.0.0.0:29400", "tok", "", false},
		{"0.0.0.0:29400", "tok", "store.pem", true},
		{"nonsense", "", "", false},
	} {
		err := CheckListen(tt.addr, Security{Token: tt.token, CertFile: tt.cert})
		if (err == nil) != tt.ok {
			t.Errorf("CheckListen(%q, token %q, cert %q) = %v", tt.addr, tt.token, tt.cert, err)
		}
	}
}
