package main

import "testing"

// One row per rule of EstimateLibpq and EstimatePgx.
func TestEstimate(t *testing.T) {
	def := Modes{SSLMode: "prefer", GSSEncMode: "prefer"}
	ticket := Modes{SSLMode: "prefer", GSSEncMode: "prefer", Credentials: true}
	rows := []struct {
		name       string
		m          Modes
		a          Answers
		libpq, pgx Cost
	}{
		{"no TLS, no ticket", def, Answers{SSL: "N"},
			Cost{Transport: "plain", Sockets: 1, Backends: 1, RoundTrips: 2},
			Cost{Transport: "plain", Sockets: 2, Backends: 2, RoundTrips: 3}},
		{"TLS", def, Answers{SSL: "S"},
			Cost{Transport: "tls", Sockets: 1, Backends: 1, RoundTrips: 3},
			Cost{Transport: "tls", Sockets: 1, Backends: 1, RoundTrips: 3}},
		{"sslmode=disable", Modes{SSLMode: "disable", GSSEncMode: "prefer"}, Answers{},
			Cost{Transport: "plain", Sockets: 1, Backends: 1, RoundTrips: 1},
			Cost{Transport: "plain", Sockets: 1, Backends: 1, RoundTrips: 1}},
		{"sslmode=require, N", Modes{SSLMode: "require", GSSEncMode: "prefer"}, Answers{SSL: "N"},
			Cost{Transport: "fails", Sockets: 1, Backends: 1, RoundTrips: 2},
			Cost{Transport: "fails", Sockets: 1, Backends: 1, RoundTrips: 2}},
		{"ticket, GSS encryption", ticket, Answers{GSS: "G", GSSEstablished: true},
			Cost{Transport: "gss", Sockets: 1, Backends: 1, RoundTrips: 3},
			Cost{Transport: "unknown", Sockets: 1, Backends: 1, RoundTrips: 2}},
		{"ticket, GSS encryption, TLS known", ticket, Answers{GSS: "G", GSSEstablished: true, SSL: "S"},
			Cost{Transport: "gss", Sockets: 1, Backends: 1, RoundTrips: 3},
			Cost{Transport: "tls", Sockets: 1, Backends: 1, RoundTrips: 3}},
		{"ticket, hostnogssenc only, no TLS", ticket, Answers{GSS: "G", SSL: "N"},
			Cost{Transport: "plain", Sockets: 2, Backends: 2, RoundTrips: 5},
			Cost{Transport: "plain", Sockets: 2, Backends: 2, RoundTrips: 3}},
		{"ticket, server answers N to GSSENCRequest", ticket, Answers{GSS: "N", SSL: "N"},
			Cost{Transport: "plain", Sockets: 1, Backends: 1, RoundTrips: 3},
			Cost{Transport: "plain", Sockets: 2, Backends: 2, RoundTrips: 3}},
		{"gssencmode=require, refused", Modes{SSLMode: "prefer", GSSEncMode: "require", Credentials: true}, Answers{GSS: "G"},
			Cost{Transport: "fails", Sockets: 1, Backends: 1, RoundTrips: 3},
			Cost{Transport: "fails", Sockets: 1, Backends: 1, RoundTrips: 1}},
		{"TLS, oauth", Modes{SSLMode: "verify-full", GSSEncMode: "prefer"}, Answers{SSL: "S", OAuth: true},
			Cost{Transport: "tls", Sockets: 2, Backends: 2, RoundTrips: 6},
			Cost{Transport: "tls", Sockets: 1, Backends: 1, RoundTrips: 3}},
		{"ticket, GSS encryption, oauth", ticket, Answers{GSS: "G", GSSEstablished: true, OAuth: true},
			Cost{Transport: "gss", Sockets: 2, Backends: 2, RoundTrips: 6},
			Cost{Transport: "unknown", Sockets: 1, Backends: 1, RoundTrips: 2}},
		{"sslmode=require, N, oauth", Modes{SSLMode: "require", GSSEncMode: "prefer"}, Answers{SSL: "N", OAuth: true},
			Cost{Transport: "fails", Sockets: 1, Backends: 1, RoundTrips: 2},
			Cost{Transport: "fails", Sockets: 1, Backends: 1, RoundTrips: 2}},
		{"gssencmode=require, no ticket", Modes{SSLMode: "prefer", GSSEncMode: "require"}, Answers{SSL: "N"},
			Cost{Transport: "fails", Sockets: 1, Backends: 1, RoundTrips: 1},
			Cost{Transport: "fails", Sockets: 1, Backends: 1, RoundTrips: 1}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			got := EstimateLibpq(r.m, r.a)
			if got.Client != "libpq" || got.Transport != r.libpq.Transport || got.Sockets != r.libpq.Sockets || got.Backends != r.libpq.Backends || got.RoundTrips != r.libpq.RoundTrips {
				t.Errorf("libpq %+v, want %+v", got, r.libpq)
			}
			got = EstimatePgx(r.m, r.a)
			if got.Client != "pgx" || got.Transport != r.pgx.Transport || got.Sockets != r.pgx.Sockets || got.Backends != r.pgx.Backends || got.RoundTrips != r.pgx.RoundTrips {
				t.Errorf("pgx %+v, want %+v", got, r.pgx)
			}
		})
	}
}
