package auth

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/xdg-go/stringprep"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/internal/scram"
)

// The connector's SASLprep against PostgreSQL 18's own (src/common/saslprep.c, which the server
// runs when a password is set and libpq when it logs in), code point by code point: for every
// edge of the RFC 3454 tables the connector uses (each range's first and last code point and
// those just outside it) and every 16th code point of the Basic Multilingual Plane, a role is
// given the password "a" U+00AD c and another U+00AD c (U+00AD is mapped to nothing: the
// prepared password differs from the password as it is, so a preparation of the other side's
// and a refusal cannot be taken for each other; with "a" in front a right-to-left code point
// breaks the bidirectional rules, alone it does not). The server's SCRAM secret of each
// (pg_authid.rolpassword: iteration count, salt, StoredKey) must be the one the connector
// derives from its preparation of the same password.
func TestSASLprepMatchesServer(t *testing.T) {
	t.Parallel()
	srv := harness.StartT(t, harness.Options{Major: 18})
	points := map[rune]bool{}
	edge := func(lo, hi rune) {
		for _, r := range []rune{lo - 1, lo, hi, hi + 1} {
			points[r] = true
		}
	}
	sets := []stringprep.Set{stringprep.TableA1, stringprep.TableC1_2, stringprep.TableC2_1, stringprep.TableC2_2,
		stringprep.TableC3, stringprep.TableC4, stringprep.TableC5, stringprep.TableC6, stringprep.TableC7,
		stringprep.TableC8, stringprep.TableC9, stringprep.TableD1, stringprep.TableD2}
	for _, s := range sets {
		for _, rr := range s {
			edge(rr[0], rr[1])
		}
	}
	for _, r := range []rune{0x00AD, 0x034F, 0x1806, 0x180B, 0x180D, 0x200B, 0x200D, 0x2060, 0xFE00, 0xFE0F, 0xFEFF} {
		edge(r, r)
	}
	for r := rune(0x80); r < 0x10000; r += 16 {
		points[r] = true
	}
	var passwords []string
	for r := range points {
		// No NUL (a C string), no surrogates (not UTF-8), nothing past Unicode.
		if r <= 0 || r > utf8.MaxRune || (r >= 0xD800 && r <= 0xDFFF) {
			continue
		}
		passwords = append(passwords, "a\u00ad"+string(r), "\u00ad"+string(r))
	}

	// The roles, with one iteration: the server's PBKDF2 is not what is compared.
	var batch []string
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := srv.ExecAdmin(context.Background(), "SET password_encryption='scram-sha-256'; SET scram_iterations=1; "+strings.Join(batch, "; ")); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for i, pw := range passwords {
		batch = append(batch, fmt.Sprintf("CREATE ROLE sp_%d PASSWORD %s", i, literal(pw)))
		if len(batch) == 500 {
			flush()
		}
	}
	flush()

	c, err := pgconnector.New(fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", srv.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db := sql.OpenDB(c)
	defer db.Close()
	rows, err := db.Query("SELECT rolname, rolpassword FROM pg_authid WHERE rolname LIKE 'sp\\_%'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n, differ := 0, 0
	for rows.Next() {
		var name, secret string
		if err := rows.Scan(&name, &secret); err != nil {
			t.Fatal(err)
		}
		i, err := strconv.Atoi(strings.TrimPrefix(name, "sp_"))
		if err != nil || i >= len(passwords) {
			t.Fatalf("role %q", name)
		}
		n++
		pw := passwords[i]
		iters, salt, stored := parseSecret(t, secret)
		prepared, _ := scram.SASLprep(pw)
		sp, err := pbkdf2.Key(sha256.New, prepared, salt, iters, sha256.Size)
		if err != nil {
			t.Fatal(err)
		}
		m := hmac.New(sha256.New, sp)
		m.Write([]byte("Client Key"))
		if got := sha256.Sum256(m.Sum(nil)); !hmac.Equal(got[:], stored) {
			if differ++; differ <= 20 {
				rawSP, _ := pbkdf2.Key(sha256.New, pw, salt, iters, sha256.Size)
				m := hmac.New(sha256.New, rawSP)
				m.Write([]byte("Client Key"))
				raw := sha256.Sum256(m.Sum(nil))
				t.Errorf("password %+q: the connector prepares it as %+q; the server's secret is of another preparation (the password as it is: %v)",
					pw, prepared, hmac.Equal(raw[:], stored))
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(passwords) {
		t.Fatalf("%d secrets read, %d passwords set", n, len(passwords))
	}
	if differ > 0 {
		t.Errorf("%d of %d passwords prepared otherwise than PostgreSQL 18 prepares them", differ, n)
	}
	t.Logf("%d passwords prepared as PostgreSQL 18 prepares them", n)
}

// literal is s as an SQL escape string constant, every code point outside printable ASCII as
// \UXXXXXXXX.
func literal(s string) string {
	var b strings.Builder
	b.WriteString("E'")
	for _, r := range s {
		if r >= 0x20 && r < 0x7f && r != '\'' && r != '\\' {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, `\U%08X`, r)
		}
	}
	b.WriteString("'")
	return b.String()
}

// parseSecret reads a SCRAM secret as PostgreSQL stores it (src/backend/libpq/auth-scram.c,
// parse_scram_secret): SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>, base64.
func parseSecret(t *testing.T, secret string) (iters int, salt, stored []byte) {
	t.Helper()
	rest, ok := strings.CutPrefix(secret, "SCRAM-SHA-256$")
	head, keys, ok2 := strings.Cut(rest, "$")
	it, s64, ok3 := strings.Cut(head, ":")
	st64, _, ok4 := strings.Cut(keys, ":")
	iters, err := strconv.Atoi(it)
	if !ok || !ok2 || !ok3 || !ok4 || err != nil {
		t.Fatalf("not a SCRAM secret: %.20q...", secret)
	}
	salt, err1 := base64.StdEncoding.DecodeString(s64)
	stored, err2 := base64.StdEncoding.DecodeString(st64)
	if err1 != nil || err2 != nil {
		t.Fatalf("SCRAM secret with bad base64")
	}
	return iters, salt, stored
}
