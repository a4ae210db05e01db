package auth

import (
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// From src/test/authentication/t/002_saslprep.pl (REL_18 branch point): roles whose passwords
// are RFC 4013's examples (section 3), set on a UTF-8 cluster, then logins with pg_hba.conf's
// scram-sha-256 and the password given (the script's PGPASSWORD).
var saslprepSetup = []string{
	`SET password_encryption='scram-sha-256'; SET client_encoding='utf8';
	 CREATE ROLE saslpreptest1_role LOGIN PASSWORD 'IX';
	 CREATE ROLE saslpreptest4a_role LOGIN PASSWORD 'a';
	 CREATE ROLE saslpreptest4b_role LOGIN PASSWORD E'\xc2\xaa';
	 CREATE ROLE saslpreptest6_role LOGIN PASSWORD E'foo\x07bar';
	 CREATE ROLE saslpreptest7_role LOGIN PASSWORD E'foo\u0627\u0031bar'`,
	// This project's rows: where PostgreSQL's SASLprep (src/common/saslprep.c) takes another
	// order than RFC 4013's. The server prepares the password it is given as libpq does.
	`SET password_encryption='scram-sha-256';
	 CREATE ROLE zero_width_space_role LOGIN PASSWORD E'a\u200Bb';
	 CREATE ROLE soft_hyphen_only_role LOGIN PASSWORD E'\u00AD';
	 CREATE ROLE modifier_a_role LOGIN PASSWORD E'x\u1D43';
	 CREATE ROLE grave_tone_role LOGIN PASSWORD E'a\u0340';
	 CREATE ROLE subscript_j_role LOGIN PASSWORD E'x\u2C7C';
	 CREATE ROLE todo_soft_hyphen_role LOGIN PASSWORD E'a\u1806b'`,
}

func login(role, password string) string { return "user=" + role + " password=" + quote(password) }

var saslprepSteps = []step{
	{name: "RFC 4013 examples", hba: []string{hostLine("all", "all", "scram-sha-256")}, rows: []row{
		// #1 and #5 are treated as "IX", unlike "ix".
		{conn: login("saslpreptest1_role", "I\u00adX"), ok: true},
		{conn: login("saslpreptest1_role", "\u2168"), ok: true},
		{conn: login("saslpreptest1_role", "ix")},
		// #4.
		{conn: login("saslpreptest4a_role", "a"), ok: true},
		{conn: login("saslpreptest4a_role", "\u00aa"), ok: true},
		{conn: login("saslpreptest4b_role", "a"), ok: true},
		{conn: login("saslpreptest4b_role", "\u00aa"), ok: true},
		// #6 and #7: a password with prohibited characters is used as it is.
		{conn: login("saslpreptest6_role", "foo\x07bar"), ok: true},
		{conn: login("saslpreptest6_role", "foobar")},
		{conn: login("saslpreptest7_role", "foo\u06271bar"), ok: true},
		{conn: login("saslpreptest7_role", "foo1\u0627bar")},
		{conn: login("saslpreptest7_role", "foobar")},
	}},
	{name: "PostgreSQL's order", rows: []row{
		// U+200B is in C.1.2 and B.1: PostgreSQL maps C.1.2 first, to a space.
		{conn: login("zero_width_space_role", "a\u200bb"), ok: true},
		{conn: login("zero_width_space_role", "a b"), ok: true},
		{conn: login("zero_width_space_role", "ab")},
		// Empty after mapping: the password as it is.
		{conn: login("soft_hyphen_only_role", "\u00ad"), ok: true},
		// Unassigned in Unicode 3.2 or prohibited, looked for before NFKC: the password as it
		// is, not its NFKC form.
		{conn: login("modifier_a_role", "x\u1d43"), ok: true},
		{conn: login("modifier_a_role", "xa")},
		{conn: login("grave_tone_role", "a\u0340"), ok: true},
		{conn: login("grave_tone_role", "\u00e0")},
		{conn: login("subscript_j_role", "x\u2c7c"), ok: true},
		{conn: login("subscript_j_role", "xj")},
		// U+1806 is in RFC 3454's B.1 (not in xdg-go/stringprep's): mapped to nothing.
		{conn: login("todo_soft_hyphen_role", "a\u1806b"), ok: true},
		{conn: login("todo_soft_hyphen_role", "ab"), ok: true},
	}},
}

func TestSASLprepSuite(t *testing.T) {
	t.Parallel()
	srv := harness.StartT(t, harness.Options{Major: 18})
	runSteps(t, srv, "dbname=postgres", saslprepSteps, saslprepSetup)
}
