package harness

import (
	"strings"
	"testing"
)

// SetClientCA needs a server with TLS, and refuses a CA file the server cannot load (the old
// setting stays, as the reload's check of the log reports).
func TestSetClientCA(t *testing.T) {
	p := StartT(t, Options{})
	if err := p.SetClientCA([]byte("x")); err == nil || !strings.Contains(err.Error(), "no TLS") {
		t.Errorf("without TLS: %v", err)
	}
	if err := p.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	if err := p.SetClientCA(p.ca.caPEM); err != nil {
		t.Errorf("the server's own CA: %v", err)
	}
	if err := p.SetClientCA([]byte("not a certificate")); err == nil {
		t.Error("a file that is no certificate was taken")
	}
	if err := p.SetSSL(true); err != nil { // rewrites the configuration: the good CA is back
		t.Errorf("after the failed SetClientCA: %v", err)
	}
}
