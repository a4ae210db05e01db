package main

import (
	"context"
	"io"
	"os"
	"slices"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template, the issuer's files) once the
// tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// The example runs as a program does: two backends on the first connect (discovery, then the
// token), one on each later one, one token request to the issuer for all of them, and the
// server took the token's identity.
func TestRun(t *testing.T) {
	iss := harness.StartOAuthIssuerT(t, harness.OAuthIssuerOptions{ClientID: clientID, ClientSecret: clientSecret})
	pg := harness.StartT(t, harness.Options{Major: 18, OAuth: oauthOptions(iss)})
	out := io.Discard
	if testing.Verbose() {
		out = os.Stdout
	}
	rep, err := run(context.Background(), out, pg, iss)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{2, 1, 1, 1, 1}
	if !slices.Equal(rep.Backends, want) || rep.TokenRequests != 1 || rep.SystemUser != "oauth:"+harness.AppUser {
		t.Errorf("backends per connect %v, %d token requests, system_user %q; want %v, 1, %q",
			rep.Backends, rep.TokenRequests, rep.SystemUser, want, "oauth:"+harness.AppUser)
	}
}
