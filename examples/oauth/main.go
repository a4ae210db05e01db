// Command oauth connects to PostgreSQL 18 with OAuth (pg_hba method oauth, SASL OAUTHBEARER):
// WithOAuthTokenFunc gives the connector the tokens of an oauth2.TokenSource, here
// golang.org/x/oauth2/clientcredentials (a service's own identity, RFC 6749 section 4.4). The
// connector asks the server once per host and user which issuer and scope it wants (a discovery
// exchange: two server backends on the first connect), remembers the answer, and sends the
// token in the first message of every later connect (one backend); the token is kept until 10 s
// before it expires, so many connections cost one token request.
//
// It runs on a throwaway local PostgreSQL 18 cluster with a local HTTPS issuer and the
// harness's validator module, which authorizes the issuer's tokens; the connection goes over
// the cluster's Unix-domain socket, a channel a token may be sent over (the others: TLS with
// sslmode=verify-ca or verify-full, GSS encryption; see docs/oauth.md).
//
// In examples/ (the examples' module):
//
//	go run ./oauth
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The service's client at the issuer (a confidential client: client_credentials needs its secret).
const (
	clientID     = "orders-service"
	clientSecret = "example-client-secret"
)

// connects is the number of connections the example opens, one after the other.
const connects = 5

// report is what the example saw.
type report struct {
	Backends      []int  // the server backends each connect started (its log's "connection received")
	TokenRequests int    // client_credentials requests to the issuer's token endpoint
	SystemUser    string // the server's system_user: the method and the token's identity
}

// open returns a connector whose connections authenticate with the tokens of ts.
func open(dsn string, ts oauth2.TokenSource) (*pgconnector.Connector, error) {
	return pgconnector.New(dsn, pgconnector.WithOAuthTokenFunc(func(context.Context, pgconnector.OAuthRequest) (*oauth2.Token, error) {
		return ts.Token()
	}))
}

func main() {
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Println("starting a local OAuth issuer and a throwaway PostgreSQL 18 cluster (oauth)...")
	iss, pg, err := start(ctx)
	if err == nil {
		_, err = run(ctx, os.Stdout, pg, iss)
	}
	if pg != nil {
		pg.Stop()
	}
	if iss != nil {
		iss.Close()
	}
	harness.Cleanup() // removes the initdb template too
	if ctx.Err() != nil {
		log.Print("oauth: interrupted; the throwaway cluster and issuer are stopped and removed")
		os.Exit(130)
	}
	if err != nil {
		log.Fatalf("oauth: %v", err)
	}
}

// start starts the issuer and a cluster whose local (Unix-domain socket) connections
// authenticate with its tokens.
func start(ctx context.Context) (*harness.OAuthIssuer, *harness.Postgres, error) {
	iss, err := harness.StartOAuthIssuer(harness.OAuthIssuerOptions{ClientID: clientID, ClientSecret: clientSecret})
	if err != nil {
		return nil, nil, err
	}
	pg, err := harness.Start(ctx, harness.Options{Major: 18, OAuth: oauthOptions(iss)})
	if err != nil {
		return iss, nil, err
	}
	return iss, pg, nil
}

// oauthOptions is the server's oauth line: issuer and scope from iss, the token's identity taken
// as the role (delegate_ident_mapping=1), on local connections.
func oauthOptions(iss *harness.OAuthIssuer) *harness.OAuthOptions {
	o := iss.OAuth()
	o.DelegateIdentMapping = true
	o.Types = []string{"local"}
	return o
}

func run(ctx context.Context, out io.Writer, pg *harness.Postgres, iss *harness.OAuthIssuer) (report, error) {
	var rep report
	// The issuer's token endpoint (its discovery document's token_endpoint); its HTTP client
	// trusts the issuer's throwaway CA.
	cc := clientcredentials.Config{ClientID: clientID, ClientSecret: clientSecret, TokenURL: iss.URL + "/token", Scopes: strings.Fields(iss.Scope)}
	ts := cc.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, iss.Client()))

	// oauth_issuer is the issuer the server must name; no oauth_client_id with a token function.
	dsn := "host=" + pg.SocketDir + " port=" + strconv.Itoa(pg.Port) + " user=" + pg.User + " dbname=" + pg.Database + " oauth_issuer=" + iss.URL
	c, err := open(dsn, ts)
	if err != nil {
		return rep, err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0) // a new connection for each query
	fmt.Fprintf(out, "%d new connections, one after the other, to %s (issuer %s):\n", connects, pg.SocketDir, iss.URL)
	for i := range connects {
		mark := pg.LogMark()
		if err := db.QueryRowContext(ctx, "SELECT system_user").Scan(&rep.SystemUser); err != nil {
			return rep, err
		}
		n, err := pg.ConnectionsSince(mark)
		if err != nil {
			return rep, err
		}
		rep.Backends = append(rep.Backends, n)
		rep.TokenRequests = iss.Counts().Tokens["client_credentials"]
		note := ""
		if n == 2 {
			note = " (the server named its issuer and scope; the token went on a new connection)"
		}
		fmt.Fprintf(out, "connection %d: %d backend(s), system_user %s, token requests so far: %d%s\n", i+1, n, rep.SystemUser, rep.TokenRequests, note)
	}
	return rep, nil
}
