package auth

import (
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// From src/test/authentication/t/001_password.pl (REL_18 branch point): the roles it makes, then
// each step of pg_hba.conf and the rows it runs there, in its order. Every row has
// password=pass (the script's PGPASSWORD) unless it says otherwise, and dbname=postgres (its
// PGDATABASE) unless it names another.
var passwordSetup = []string{
	"CREATE DATABASE test_log_connections",
	"SET password_encryption='scram-sha-256'; CREATE ROLE scram_role LOGIN PASSWORD 'pass'",
	"SET password_encryption='md5'; CREATE ROLE md5_role LOGIN PASSWORD 'pass'",
	`SET password_encryption='scram-sha-256'; CREATE ROLE "scram,role" LOGIN PASSWORD 'pass'`,
	"SET password_encryption='scram-sha-256'; SET scram_iterations=1024; CREATE ROLE scram_role_iter LOGIN PASSWORD 'pass'",
	"CREATE DATABASE regex_testdb",
	"CREATE DATABASE regress_regression_group",
	`CREATE ROLE regress_regression_group LOGIN PASSWORD 'pass';
	 CREATE ROLE regress_member LOGIN SUPERUSER IN ROLE regress_regression_group PASSWORD 'pass';
	 CREATE ROLE regress_not_member LOGIN SUPERUSER PASSWORD 'pass'`,
}

// libpq's messages as the script expects them.
const (
	notCompleted = "failed: server did not complete authentication"
	cleartext    = "failed: server requested a cleartext password"
	hashed       = "failed: server requested a hashed password"
	sasl         = "failed: server requested SASL authentication"
	scramSHA256  = "failed: server requested SCRAM-SHA-256 authentication"
)

func requirement(ra, reason string) string {
	return `authentication method requirement "` + ra + `" ` + reason
}

var passwordSteps = []step{
	{name: "log_connections", hba: []string{hostLine("all", "all", "trust")},
		setup: []string{"ALTER SYSTEM SET log_connections = on", "SELECT pg_reload_conf()"},
		rows:  []row{{conn: "user=postgres dbname=test_log_connections", ok: true}}},
	{name: "log_connections subset",
		setup: []string{"ALTER SYSTEM SET log_connections = receipt,authorization,setup_durations", "SELECT pg_reload_conf()"},
		rows:  []row{{conn: "user=postgres dbname=test_log_connections", ok: true}}},
	{name: "log_connections all",
		setup: []string{"ALTER SYSTEM SET log_connections = 'all'", "SELECT pg_reload_conf()"},
		rows:  []row{{conn: "user=postgres dbname=test_log_connections", ok: true}}},

	{name: "trust", hba: []string{hostLine("all", "all", "trust")}, rows: []row{
		{conn: "user=scram_role", ok: true},
		{conn: "user=md5_role", ok: true},
		{conn: "user=scram_role require_auth=", ok: true},
		{conn: "user=scram_role require_auth=gss", msg: requirement("gss", notCompleted)},
		{conn: "user=scram_role require_auth=sspi", msg: requirement("sspi", notCompleted)},
		{conn: "user=scram_role require_auth=password", msg: requirement("password", notCompleted)},
		{conn: "user=scram_role require_auth=md5", msg: requirement("md5", notCompleted)},
		{conn: "user=scram_role require_auth=scram-sha-256", msg: requirement("scram-sha-256", notCompleted)},
		{conn: "user=scram_role require_auth=password,scram-sha-256", msg: requirement("password,scram-sha-256", notCompleted)},
		{conn: "user=scram_role require_auth=!gss", ok: true},
		{conn: "user=scram_role require_auth=!sspi", ok: true},
		{conn: "user=scram_role require_auth=!password", ok: true},
		{conn: "user=scram_role require_auth=!md5", ok: true},
		{conn: "user=scram_role require_auth=!scram-sha-256", ok: true},
		{conn: "user=scram_role require_auth=!password,!scram-sha-256", ok: true},
		{conn: "user=scram_role require_auth=none", ok: true},
		{conn: "user=scram_role require_auth=!none", msg: "server did not complete authentication"},
		{conn: "user=scram_role require_auth=scram-sha-256,!md5", msg: `negative require_auth method "!md5" cannot be mixed with non-negative methods`},
		{conn: "user=scram_role require_auth=!password,!none,scram-sha-256", msg: `require_auth method "scram-sha-256" cannot be mixed with negative methods`},
		{conn: "user=scram_role require_auth=password,md5,password", msg: `require_auth method "password" is specified more than once`},
		{conn: "user=scram_role require_auth=!password,!md5,!password", msg: `require_auth method "!password" is specified more than once`},
		{conn: "user=scram_role require_auth=none,md5,none", msg: `require_auth method "none" is specified more than once`},
		{conn: "user=scram_role require_auth=!none,!md5,!none", msg: `require_auth method "!none" is specified more than once`},
		{conn: "user=scram_role require_auth=scram-sha-256,scram-sha-256", msg: `require_auth method "scram-sha-256" is specified more than once`},
		{conn: "user=scram_role require_auth=!scram-sha-256,!scram-sha-256", msg: `require_auth method "!scram-sha-256" is specified more than once`},
		{conn: "user=scram_role require_auth=none,abcdefg", msg: `invalid require_auth value: "abcdefg"`},
	}},

	{name: "password", hba: []string{hostLine("all", "all", "password")}, rows: []row{
		{conn: "user=scram_role", ok: true},
		{conn: "user=md5_role", ok: true},
		{conn: "user=scram_role require_auth=password", ok: true},
		{conn: "user=scram_role require_auth=!none", ok: true},
		{conn: "user=scram_role require_auth=scram-sha-256,password,md5", ok: true},
		{conn: "user=scram_role require_auth=md5", msg: requirement("md5", cleartext)},
		{conn: "user=scram_role require_auth=scram-sha-256", msg: requirement("scram-sha-256", cleartext)},
		{conn: "user=scram_role require_auth=none", msg: requirement("none", cleartext)},
		{conn: "user=scram_role require_auth=!password", msg: "server requested a cleartext password"},
		{conn: "user=scram_role require_auth=!password,!md5,!scram-sha-256", msg: requirement("!password,!md5,!scram-sha-256", cleartext)},
	}},

	{name: "scram-sha-256", hba: []string{hostLine("all", "all", "scram-sha-256")}, rows: []row{
		{conn: "user=scram_role", ok: true},
		{conn: "user=scram_role_iter", ok: true},
		{conn: "user=md5_role"},
		{conn: "user=scram_role require_auth=scram-sha-256", ok: true},
		{conn: "user=scram_role require_auth=!none", ok: true},
		{conn: "user=scram_role require_auth=password,scram-sha-256,md5", ok: true},
		{conn: "user=scram_role require_auth=password", msg: requirement("password", sasl)},
		{conn: "user=scram_role require_auth=md5", msg: requirement("md5", sasl)},
		{conn: "user=scram_role require_auth=none", msg: requirement("none", sasl)},
		{conn: "user=scram_role require_auth=!scram-sha-256", msg: "server requested SCRAM-SHA-256 authentication"},
		{conn: "user=scram_role require_auth=!password,!md5,!scram-sha-256", msg: "server requested SCRAM-SHA-256 authentication"},
		{conn: "user=scram_role password=badpass"},
	}},

	{name: "md5", hba: []string{hostLine("all", "all", "md5")}, rows: []row{
		{conn: "user=scram_role", ok: true}, // SCRAM, the role's secret being SCRAM's
		{conn: "user=md5_role", ok: true},
		{conn: "user=scram_role require_auth=scram-sha-256", ok: true},
		{conn: "user=scram_role require_auth=!none", ok: true},
		{conn: "user=scram_role require_auth=md5,scram-sha-256,password", ok: true},
		{conn: "user=scram_role require_auth=password", msg: requirement("password", sasl)},
		{conn: "user=scram_role require_auth=md5", msg: requirement("md5", sasl)},
		{conn: "user=scram_role require_auth=none", msg: requirement("none", sasl)},
		{conn: "user=scram_role require_auth=!scram-sha-256", msg: requirement("!scram-sha-256", scramSHA256)},
		{conn: "user=scram_role require_auth=!password,!md5,!scram-sha-256", msg: requirement("!password,!md5,!scram-sha-256", scramSHA256)},
	}},

	// Channel binding without SSL (the script's PGCHANNELBINDING=require).
	{name: "channel binding, password", hba: []string{hostLine("all", "all", "password")}, rows: []row{
		{conn: "user=scram_role channel_binding=require"},
	}},
	{name: "channel binding, scram-sha-256", hba: []string{hostLine("all", "all", "scram-sha-256")}, rows: []row{
		{conn: "user=scram_role channel_binding=require"},
	}},

	// pg_hba.conf's regular expressions for the user and the database.
	{name: "user regexp matches", hba: []string{hostLine("all", "/^.*nomatch.*$, baduser, /^scr.*$", "password")}, rows: []row{
		{conn: "user=scram_role", ok: true},
	}},
	{name: "user regexp does not match", hba: []string{hostLine("all", "/^.*nomatch.*$, baduser, /^sc_r.*$", "password")}, rows: []row{
		{conn: "user=scram_role"},
	}},
	{name: "user regexp with a comma", hba: []string{hostLine("all", `"/^.*m,.*e$"`, "password")}, rows: []row{
		{conn: "user=scram,role", ok: true},
	}},
	{name: "database regexp matches", hba: []string{hostLine("/^.*nomatch.*$, baddb, /^regex_t.*b$", "all", "password")}, rows: []row{
		{conn: "user=scram_role dbname=regex_testdb", ok: true},
	}},
	{name: "database regexp does not match", hba: []string{hostLine("/^.*nomatch.*$, baddb, /^regex_t.*ba$", "all", "password")}, rows: []row{
		{conn: "user=scram_role dbname=regex_testdb"},
	}},

	// pg_hba.conf's role names and membership.
	{name: "exact role", hba: []string{hostLine("all", "regress_regression_group", "scram-sha-256")}, rows: []row{
		{conn: "user=regress_regression_group", ok: true},
		{conn: "user=regress_member"},
		{conn: "user=regress_not_member"},
	}},
	{name: "role members", hba: []string{hostLine("all", "+regress_regression_group", "scram-sha-256")}, rows: []row{
		{conn: "user=regress_regression_group", ok: true},
		{conn: "user=regress_member", ok: true},
		{conn: "user=regress_not_member"},
	}},
	{name: "samerole", hba: []string{hostLine("samerole", "all", "scram-sha-256")}, rows: []row{
		{conn: "user=regress_regression_group dbname=regress_regression_group", ok: true},
		{conn: "user=regress_member dbname=regress_regression_group", ok: true},
		{conn: "user=regress_not_member dbname=regress_regression_group"},
	}},
	// Beyond the script: require_auth's SASL mechanisms as libpq 18 holds them (fe-connect.c,
	// pqConnectOptions2: a SASL request is allowed while a mechanism is; fe-auth.c, pg_SASL_init:
	// the mechanism chosen is checked), and libpq's white space (none trimmed).
	{name: "SASL mechanisms", hba: []string{hostLine("all", "all", "scram-sha-256")}, rows: []row{
		{conn: "user=scram_role require_auth=!scram-sha-256,!oauth", msg: requirement("!scram-sha-256,!oauth", sasl)},
		{conn: "user=scram_role require_auth=oauth", msg: requirement("oauth", scramSHA256)},
		{conn: "user=scram_role require_auth=!oauth", ok: true},
		{conn: "user=scram_role require_auth=oauth,scram-sha-256", ok: true},
		{conn: "user=scram_role require_auth='password, scram-sha-256'", msg: `invalid require_auth value: `},
	}},
	{name: "samegroup", hba: []string{hostLine("samegroup", "all", "scram-sha-256")}, rows: []row{
		{conn: "user=regress_regression_group dbname=regress_regression_group", ok: true},
		{conn: "user=regress_member dbname=regress_regression_group", ok: true},
		{conn: "user=regress_not_member dbname=regress_regression_group"},
	}},
}

func TestPasswordSuite(t *testing.T) {
	t.Parallel()
	srv := harness.StartT(t, harness.Options{Major: 18})
	runSteps(t, srv, "dbname=postgres password=pass", passwordSteps, passwordSetup)
}
