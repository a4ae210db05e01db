package negotiate

// The tables of PostgreSQL's src/interfaces/libpq/t/005_negotiate_encryption.pl, written as
// data: for a user, gssencmode, sslmode and sslnegotiation, the EVENTS the server sees and the
// OUTCOME. The events are the script's (parse_log_events):
//
//	connect          a TCP connection was established
//	reconnect        the connection was closed and a new one established
//	sslaccept        SSLRequest, answered 'S'           (sslreject: 'N')
//	directsslaccept  a TLS handshake as the first bytes, accepted (directsslreject: refused)
//	gssaccept        GSSENCRequest, answered 'G'        (gssreject: 'N')
//	authok           the startup packet was sent and authentication succeeded
//	authfail         the startup packet was sent and pg_hba.conf had no line for it
//	-                no event at all (the client refused before connecting)
//
// and the outcomes plain, ssl, gss (the connection's encryption, as the script's current_enc()
// tells it) or fail. A "*" stands for every value of its column; a later row replaces an
// earlier one for the same key, as in the script's parse_table.

// A row005 is one line of a table.
type row005 struct {
	user, gssencmode, sslmode, sslnegotiation string
	events                                    string // "connect, sslaccept, authok", or "-"
	outcome                                   string // plain, ssl, gss or fail
}

// The values of each column (the script's @all_test_users, @all_gssencmodes, @all_sslmodes,
// @all_sslnegotiations).
var (
	allUsers           = []string{"testuser", "ssluser", "nossluser", "gssuser", "nogssuser"}
	allGSSEncModes     = []string{"disable", "prefer", "require"}
	allSSLModes        = []string{"disable", "allow", "prefer", "require"}
	allSSLNegotiations = []string{"postgres", "direct"}
)

// weakDirect005 are the rows every table ends with: sslnegotiation=direct is refused unless
// sslmode is require or stronger, before any connection.
var weakDirect005 = []row005{
	{"*", "*", "disable", "direct", "-", "fail"},
	{"*", "*", "allow", "direct", "-", "fail"},
	{"*", "*", "prefer", "direct", "-", "fail"},
}

// tableSSLOff005 is "Run tests with GSS and SSL disabled in the server", for a libpq built
// with SSL, with the rows for gssencmode=require appended after it: they fail before
// connecting, the client having no credential cache (or no GSSAPI).
var tableSSLOff005 = concat([]row005{
	{"testuser", "disable", "disable", "postgres", "connect, authok", "plain"},
	{"testuser", "disable", "allow", "postgres", "connect, authok", "plain"},
	{"testuser", "disable", "prefer", "postgres", "connect, sslreject, authok", "plain"},
	{"testuser", "disable", "require", "postgres", "connect, sslreject", "fail"},
	{"testuser", "disable", "require", "direct", "connect, directsslreject", "fail"},
	{"testuser", "prefer", "disable", "postgres", "connect, authok", "plain"},
	{"testuser", "prefer", "allow", "postgres", "connect, authok", "plain"},
	{"testuser", "prefer", "prefer", "postgres", "connect, sslreject, authok", "plain"},
	{"testuser", "prefer", "require", "postgres", "connect, sslreject", "fail"},
	{"testuser", "prefer", "require", "direct", "connect, directsslreject", "fail"},
}, weakDirect005, []row005{
	{"testuser", "require", "*", "*", "-", "fail"},
})

// tableSSLOn005 is "Run tests with GSS disabled and SSL enabled in the server".
var tableSSLOn005 = concat([]row005{
	{"testuser", "disable", "disable", "postgres", "connect, authok", "plain"},
	{"testuser", "disable", "allow", "postgres", "connect, authok", "plain"},
	{"testuser", "disable", "prefer", "postgres", "connect, sslaccept, authok", "ssl"},
	{"testuser", "disable", "require", "postgres", "connect, sslaccept, authok", "ssl"},
	{"testuser", "disable", "require", "direct", "connect, directsslaccept, authok", "ssl"},
	{"ssluser", "disable", "disable", "postgres", "connect, authfail", "fail"},
	{"ssluser", "disable", "allow", "postgres", "connect, authfail, reconnect, sslaccept, authok", "ssl"},
	{"ssluser", "disable", "prefer", "postgres", "connect, sslaccept, authok", "ssl"},
	{"ssluser", "disable", "require", "postgres", "connect, sslaccept, authok", "ssl"},
	{"ssluser", "disable", "require", "direct", "connect, directsslaccept, authok", "ssl"},
	{"nossluser", "disable", "disable", "postgres", "connect, authok", "plain"},
	{"nossluser", "disable", "allow", "postgres", "connect, authok", "plain"},
	{"nossluser", "disable", "prefer", "postgres", "connect, sslaccept, authfail, reconnect, authok", "plain"},
	{"nossluser", "disable", "require", "postgres", "connect, sslaccept, authfail", "fail"},
	{"nossluser", "disable", "require", "direct", "connect, directsslaccept, authfail", "fail"},
}, weakDirect005)

// tableGSSOn005 is "Run tests with GSS enabled, SSL disabled in the server". Its rows with
// sslnegotiation=direct are not here: they need a client with both sslnegotiation and GSSAPI
// (libpq 17+) and a server with both direct TLS and GSSAPI (PostgreSQL 17+), and the GSS
// tables run on PostgreSQL 15 with libpq 15 (the 16-18 builds here have no GSSAPI). They are:
//
//	testuser  disable require direct  connect, directsslreject                          -> fail
//	testuser  prefer  require direct  connect, gssaccept, authok                        -> gss
//	testuser  require require direct  connect, gssaccept, authok                        -> gss
//	gssuser   disable require direct  connect, directsslreject                          -> fail
//	gssuser   prefer  require direct  connect, gssaccept, authok                        -> gss
//	gssuser   require require direct  connect, gssaccept, authok                        -> gss
//	nogssuser disable require direct  connect, directsslreject                          -> fail
//	nogssuser prefer  require direct  connect, gssaccept, authfail, reconnect, directsslreject -> fail
//	nogssuser require require direct  connect, gssaccept, authfail                      -> fail
//	*         *       disable|allow|prefer direct  -                                    -> fail
var tableGSSOn005 = []row005{
	{"testuser", "disable", "disable", "postgres", "connect, authok", "plain"},
	{"testuser", "disable", "allow", "postgres", "connect, authok", "plain"},
	{"testuser", "disable", "prefer", "postgres", "connect, sslreject, authok", "plain"},
	{"testuser", "disable", "require", "postgres", "connect, sslreject", "fail"},
	{"testuser", "prefer", "*", "postgres", "connect, gssaccept, authok", "gss"},
	{"testuser", "require", "*", "postgres", "connect, gssaccept, authok", "gss"},

	{"gssuser", "disable", "disable", "postgres", "connect, authfail", "fail"},
	{"gssuser", "disable", "allow", "postgres", "connect, authfail, reconnect, sslreject", "fail"},
	{"gssuser", "disable", "prefer", "postgres", "connect, sslreject, authfail", "fail"},
	{"gssuser", "disable", "require", "postgres", "connect, sslreject", "fail"},
	{"gssuser", "prefer", "*", "postgres", "connect, gssaccept, authok", "gss"},
	{"gssuser", "require", "*", "postgres", "connect, gssaccept, authok", "gss"},

	{"nogssuser", "disable", "disable", "postgres", "connect, authok", "plain"},
	{"nogssuser", "disable", "allow", "postgres", "connect, authok", "plain"},
	{"nogssuser", "disable", "prefer", "postgres", "connect, sslreject, authok", "plain"},
	{"nogssuser", "disable", "require", "postgres", "connect, sslreject", "fail"},
	{"nogssuser", "prefer", "disable", "postgres", "connect, gssaccept, authfail, reconnect, authok", "plain"},
	{"nogssuser", "prefer", "allow", "postgres", "connect, gssaccept, authfail, reconnect, authok", "plain"},
	{"nogssuser", "prefer", "prefer", "postgres", "connect, gssaccept, authfail, reconnect, sslreject, authok", "plain"},
	{"nogssuser", "prefer", "require", "postgres", "connect, gssaccept, authfail, reconnect, sslreject", "fail"},
	{"nogssuser", "require", "disable", "postgres", "connect, gssaccept, authfail", "fail"},
	{"nogssuser", "require", "allow", "postgres", "connect, gssaccept, authfail", "fail"},
	{"nogssuser", "require", "prefer", "postgres", "connect, gssaccept, authfail", "fail"},
	// If both GSSAPI and sslmode are required, and GSS is not available: fail.
	{"nogssuser", "require", "require", "postgres", "connect, gssaccept, authfail", "fail"},
}

// sanityGSSOn005 is the script's check, before SSL is turned on, that GSSAPI still works: the
// connection string gives no sslnegotiation.
var sanityGSSOn005 = row005{"testuser", "prefer", "prefer", "", "connect, gssaccept, authok", "gss"}

// tableBothOn005 is "Tests with both GSS and SSL enabled in the server". Its rows with
// sslnegotiation=direct are not here, for the reason given at tableGSSOn005. They are:
//
//	testuser  disable require direct  connect, directsslaccept, authok                 -> ssl
//	testuser  prefer  require direct  connect, gssaccept, authok                       -> gss
//	testuser  require require direct  connect, gssaccept, authok                       -> gss
//	gssuser   disable require direct  connect, directsslaccept, authfail               -> fail
//	gssuser   prefer  require direct  connect, gssaccept, authok                       -> gss
//	gssuser   require require direct  connect, gssaccept, authok                       -> gss
//	ssluser   disable require direct  connect, directsslaccept, authok                 -> ssl
//	ssluser   prefer  require direct  connect, gssaccept, authfail, reconnect, directsslaccept, authok -> ssl
//	ssluser   require require direct  connect, gssaccept, authfail                     -> fail
//	nogssuser disable require direct  connect, directsslaccept, authok                 -> ssl
//	nogssuser prefer  require direct  connect, gssaccept, authfail, reconnect, directsslaccept, authok -> ssl
//	nogssuser require require direct  connect, gssaccept, authfail                     -> fail
//	nossluser disable require direct  connect, directsslaccept, authfail               -> fail
//	nossluser prefer  require direct  connect, gssaccept, authok                       -> gss
//	nossluser require require direct  connect, gssaccept, authok                       -> gss
//	*         *       disable|allow|prefer direct  -                                   -> fail
var tableBothOn005 = []row005{
	{"testuser", "disable", "disable", "postgres", "connect, authok", "plain"},
	{"testuser", "disable", "allow", "postgres", "connect, authok", "plain"},
	{"testuser", "disable", "prefer", "postgres", "connect, sslaccept, authok", "ssl"},
	{"testuser", "disable", "require", "postgres", "connect, sslaccept, authok", "ssl"},
	{"testuser", "prefer", "disable", "postgres", "connect, gssaccept, authok", "gss"},
	{"testuser", "prefer", "allow", "postgres", "connect, gssaccept, authok", "gss"},
	{"testuser", "prefer", "prefer", "postgres", "connect, gssaccept, authok", "gss"},
	// If both GSS and SSL are possible, GSS is chosen over SSL, even with sslmode=require.
	{"testuser", "prefer", "require", "postgres", "connect, gssaccept, authok", "gss"},
	{"testuser", "require", "disable", "postgres", "connect, gssaccept, authok", "gss"},
	{"testuser", "require", "allow", "postgres", "connect, gssaccept, authok", "gss"},
	{"testuser", "require", "prefer", "postgres", "connect, gssaccept, authok", "gss"},
	{"testuser", "require", "require", "postgres", "connect, gssaccept, authok", "gss"},

	{"gssuser", "disable", "disable", "postgres", "connect, authfail", "fail"},
	{"gssuser", "disable", "allow", "postgres", "connect, authfail, reconnect, sslaccept, authfail", "fail"},
	{"gssuser", "disable", "prefer", "postgres", "connect, sslaccept, authfail, reconnect, authfail", "fail"},
	{"gssuser", "disable", "require", "postgres", "connect, sslaccept, authfail", "fail"},
	{"gssuser", "prefer", "disable", "postgres", "connect, gssaccept, authok", "gss"},
	{"gssuser", "prefer", "allow", "postgres", "connect, gssaccept, authok", "gss"},
	{"gssuser", "prefer", "prefer", "postgres", "connect, gssaccept, authok", "gss"},
	{"gssuser", "prefer", "require", "postgres", "connect, gssaccept, authok", "gss"},
	{"gssuser", "require", "disable", "postgres", "connect, gssaccept, authok", "gss"},
	{"gssuser", "require", "allow", "postgres", "connect, gssaccept, authok", "gss"},
	{"gssuser", "require", "prefer", "postgres", "connect, gssaccept, authok", "gss"},
	{"gssuser", "require", "require", "postgres", "connect, gssaccept, authok", "gss"},

	{"ssluser", "disable", "disable", "postgres", "connect, authfail", "fail"},
	{"ssluser", "disable", "allow", "postgres", "connect, authfail, reconnect, sslaccept, authok", "ssl"},
	{"ssluser", "disable", "prefer", "postgres", "connect, sslaccept, authok", "ssl"},
	{"ssluser", "disable", "require", "postgres", "connect, sslaccept, authok", "ssl"},
	{"ssluser", "prefer", "disable", "postgres", "connect, gssaccept, authfail, reconnect, authfail", "fail"},
	{"ssluser", "prefer", "allow", "postgres", "connect, gssaccept, authfail, reconnect, authfail, reconnect, sslaccept, authok", "ssl"},
	{"ssluser", "prefer", "prefer", "postgres", "connect, gssaccept, authfail, reconnect, sslaccept, authok", "ssl"},
	{"ssluser", "prefer", "require", "postgres", "connect, gssaccept, authfail, reconnect, sslaccept, authok", "ssl"},
	{"ssluser", "require", "disable", "postgres", "connect, gssaccept, authfail", "fail"},
	{"ssluser", "require", "allow", "postgres", "connect, gssaccept, authfail", "fail"},
	{"ssluser", "require", "prefer", "postgres", "connect, gssaccept, authfail", "fail"},
	// If both GSS and SSL are required, sslmode=require is in effect ignored and GSS required.
	{"ssluser", "require", "require", "postgres", "connect, gssaccept, authfail", "fail"},

	{"nogssuser", "disable", "disable", "postgres", "connect, authok", "plain"},
	{"nogssuser", "disable", "allow", "postgres", "connect, authok", "plain"},
	{"nogssuser", "disable", "prefer", "postgres", "connect, sslaccept, authok", "ssl"},
	{"nogssuser", "disable", "require", "postgres", "connect, sslaccept, authok", "ssl"},
	{"nogssuser", "prefer", "disable", "postgres", "connect, gssaccept, authfail, reconnect, authok", "plain"},
	{"nogssuser", "prefer", "allow", "postgres", "connect, gssaccept, authfail, reconnect, authok", "plain"},
	{"nogssuser", "prefer", "prefer", "postgres", "connect, gssaccept, authfail, reconnect, sslaccept, authok", "ssl"},
	{"nogssuser", "prefer", "require", "postgres", "connect, gssaccept, authfail, reconnect, sslaccept, authok", "ssl"},
	{"nogssuser", "require", "disable", "postgres", "connect, gssaccept, authfail", "fail"},
	{"nogssuser", "require", "allow", "postgres", "connect, gssaccept, authfail", "fail"},
	{"nogssuser", "require", "prefer", "postgres", "connect, gssaccept, authfail", "fail"},
	{"nogssuser", "require", "require", "postgres", "connect, gssaccept, authfail", "fail"},

	{"nossluser", "disable", "disable", "postgres", "connect, authok", "plain"},
	{"nossluser", "disable", "allow", "postgres", "connect, authok", "plain"},
	{"nossluser", "disable", "prefer", "postgres", "connect, sslaccept, authfail, reconnect, authok", "plain"},
	{"nossluser", "disable", "require", "postgres", "connect, sslaccept, authfail", "fail"},
	{"nossluser", "prefer", "*", "postgres", "connect, gssaccept, authok", "gss"},
	{"nossluser", "require", "*", "postgres", "connect, gssaccept, authok", "gss"},
}

// Over a Unix-domain socket ("Test negotiation over unix domain sockets"), as localuser,
// whose pg_hba.conf line is "local": libpq tries neither SSL nor GSSAPI there, and refuses
// gssencmode=require before connecting.
var tableUnixSocket005 = []row005{
	{"localuser", "prefer", "prefer", "", "connect, authok", "plain"},
	{"localuser", "require", "prefer", "", "-", "fail"},
}

// hba005 are the script's pg_hba.conf lines for TCP (its "local postgres localuser trust"
// line is in the harness's "local all all trust"); hostssl only when the server has SSL,
// hostgssenc only when it has GSSAPI (PostgreSQL refuses the line otherwise).
func hba005(ssl, gss bool) []string {
	lines := []string{
		"host          postgres        testuser        127.0.0.1/32             trust",
		"hostnossl     postgres        nossluser       127.0.0.1/32             trust",
		"hostnogssenc  postgres        nogssuser       127.0.0.1/32             trust",
	}
	if ssl {
		lines = append(lines, "hostssl       postgres        ssluser         127.0.0.1/32             trust")
	}
	if gss {
		lines = append(lines, "hostgssenc    postgres        gssuser         127.0.0.1/32             trust")
	}
	return lines
}

// setupSQL005 creates the script's roles and its current_enc() function, in database postgres.
const setupSQL005 = `
CREATE USER localuser;
CREATE USER testuser;
CREATE USER ssluser;
CREATE USER nossluser;
CREATE USER gssuser;
CREATE USER nogssuser;
CREATE FUNCTION current_enc() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  ssl_in_use bool;
  gss_in_use bool;
BEGIN
  ssl_in_use = (SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid());
  gss_in_use = (SELECT encrypted FROM pg_stat_gssapi WHERE pid = pg_backend_pid());
  IF ssl_in_use AND gss_in_use THEN
    RETURN 'ssl+gss';
  ELSIF ssl_in_use THEN
    RETURN 'ssl';
  ELSIF gss_in_use THEN
    RETURN 'gss';
  ELSE
    RETURN 'plain';
  END IF;
END;
$$;`

func concat(tables ...[]row005) []row005 {
	var out []row005
	for _, t := range tables {
		out = append(out, t...)
	}
	return out
}

// expand005 expands the wildcards of a table into one expectation per key "user gssencmode
// sslmode sslnegotiation", a later row replacing an earlier one (parse_table,
// expand_expected_line).
func expand005(table []row005) map[string]row005 {
	out := map[string]row005{}
	for _, r := range table {
		for _, u := range orAll(r.user, allUsers) {
			for _, g := range orAll(r.gssencmode, allGSSEncModes) {
				for _, s := range orAll(r.sslmode, allSSLModes) {
					for _, n := range orAll(r.sslnegotiation, allSSLNegotiations) {
						out[u+" "+g+" "+s+" "+n] = row005{u, g, s, n, r.events, r.outcome}
					}
				}
			}
		}
	}
	return out
}

func orAll(v string, all []string) []string {
	if v == "*" {
		return all
	}
	return []string{v}
}

// matrix005 is the script's test_matrix: the rows of the cube users x gssencmodes x sslmodes x
// sslnegotiations, in its order, each with its expectation from the table; a key the table
// has no row for is an error (the script's "<line missing from expected output table>").
func matrix005(table []row005, users, gssencmodes, sslmodes, negotiations []string) ([]row005, []string) {
	want := expand005(table)
	var rows []row005
	var missing []string
	for _, u := range users {
		for _, g := range gssencmodes {
			for _, s := range sslmodes {
				for _, n := range negotiations {
					key := u + " " + g + " " + s + " " + n
					r, ok := want[key]
					if !ok {
						missing = append(missing, key)
						continue
					}
					rows = append(rows, r)
				}
			}
		}
	}
	return rows, missing
}
