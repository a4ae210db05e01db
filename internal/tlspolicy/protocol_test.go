package tlspolicy

import (
	"crypto/tls"
	"slices"
	"testing"
)

// The protocol version values as libpq reads them: in any letter case, lowest first.
func TestProtocolVersions(t *testing.T) {
	if got, want := ProtocolVersions(), []string{"TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"}; !slices.Equal(got, want) {
		t.Fatalf("ProtocolVersions() = %q, want %q", got, want)
	}
	ProtocolVersions()[0] = "changed"
	if ProtocolVersions()[0] != "TLSv1" {
		t.Fatal("ProtocolVersions returns its own slice")
	}
	for _, tt := range []struct {
		in   string
		name string
		id   uint16
		ok   bool
	}{
		{"TLSv1", "TLSv1", tls.VersionTLS10, true},
		{"tlsv1.1", "TLSv1.1", tls.VersionTLS11, true},
		{"TLSV1.2", "TLSv1.2", tls.VersionTLS12, true},
		{"TLSv1.3", "TLSv1.3", tls.VersionTLS13, true},
		{"", "", 0, false},
		{"TLSv1.4", "", 0, false},
		{"SSLv3", "", 0, false},
		{" TLSv1.2", "", 0, false},
	} {
		name, id, ok := ParseProtocolVersion(tt.in)
		if name != tt.name || id != tt.id || ok != tt.ok {
			t.Errorf("ParseProtocolVersion(%q) = %q, %#x, %v; want %q, %#x, %v", tt.in, name, id, ok, tt.name, tt.id, tt.ok)
		}
	}
	for _, tt := range []struct {
		min, max string
		want     bool
	}{
		{"TLSv1.2", "TLSv1.3", true},
		{"TLSv1.2", "TLSv1.2", true},
		{"TLSv1.3", "TLSv1.2", false},
		{"TLSv1.1", "TLSv1", false},
		{"", "TLSv1", true},
		{"TLSv1.3", "", true},
		{DefaultMinProtocolVersion, "TLSv1.1", false},
	} {
		if got := ProtocolRangeValid(tt.min, tt.max); got != tt.want {
			t.Errorf("ProtocolRangeValid(%q, %q) = %v, want %v", tt.min, tt.max, got, tt.want)
		}
	}
}
