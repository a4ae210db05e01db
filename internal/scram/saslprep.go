package scram

import (
	"unicode/utf8"

	"github.com/xdg-go/stringprep"
	"golang.org/x/text/unicode/norm"
)

// SASLprep prepares a password as PostgreSQL's pg_saslprep does (src/common/saslprep.c), which
// both the server (when a password is set) and libpq (when it logs in) run: SASLprep (RFC 4013,
// the stringprep profile of RFC 3454) in PostgreSQL's own steps and order, which are not RFC
// 4013's in three ways. It returns the prepared password and true, or the password as it is and
// false where pg_saslprep fails and its callers use the password as it is (libpq's
// pg_fe_scram_init, the server's pg_be_scram_build_secret):
//
//  1. A password of ASCII bytes only is used as it is (no check at all: control characters
//     included).
//  2. A password that is not valid UTF-8 is used as it is.
//  3. Mapping, each code point in turn: one of RFC 3454's table C.1.2 (non-ASCII space) becomes
//     U+0020 SPACE; else one of table B.1 (commonly mapped to nothing) is dropped. C.1.2 is
//     checked first: U+200B ZERO WIDTH SPACE, in both tables, becomes a space.
//  4. A password empty after mapping (only B.1 code points) is used as it is.
//  5. The mapped password, BEFORE normalization, must hold no prohibited code point (tables
//     C.1.2, C.2.1, C.2.2, C.3 to C.9) and no code point unassigned in Unicode 3.2 (table A.1),
//     and must pass the bidirectional rules (RFC 3454 section 6, tables D.1 and D.2: with a
//     RandALCat code point, no LCat one, and RandALCat first and last); else it is used as it
//     is. RFC 4013 checks the normalized string instead: U+1D43 or U+2C7C (assigned after
//     Unicode 3.2) and U+0340 (prohibited, C.8) normalize to permitted code points, and RFC
//     4013 would accept what PostgreSQL uses as it is.
//  6. The result is the NFKC normalization of the mapped password.
//
// The tables are RFC 3454's, as github.com/xdg-go/stringprep exports them where they are
// PostgreSQL's (its prohibited table is the union of the ones above, merged into ranges), and
// this package's own B.1, which xdg-go/stringprep has without U+1806. NFKC is
// golang.org/x/text/unicode/norm's: Unicode 15.0 with Go 1.26, 17.0 with Go 1.27, where
// PostgreSQL 18 has 16.0. The versions cannot give different results here: step 5 lets only
// code points assigned in Unicode 3.2 reach NFKC, and Unicode's normalization stability policy
// (since 4.1) fixes the normalization of such strings in every later version.
//
// Every exchange prepares its password with it; it is exported for the tests that hold it
// against a PostgreSQL server.
func SASLprep(password string) (string, bool) {
	ascii := true
	for i := 0; i < len(password); i++ {
		if password[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return password, true
	}
	if !utf8.ValidString(password) {
		return password, false
	}
	mapped := make([]rune, 0, len(password))
	for _, r := range password {
		switch {
		case stringprep.TableC1_2.Contains(r):
			mapped = append(mapped, ' ')
		case isMappedToNothing(r):
		default:
			mapped = append(mapped, r)
		}
	}
	if len(mapped) == 0 {
		return password, false
	}
	randAL := false
	for _, r := range mapped {
		if prohibited(r) || stringprep.TableA1.Contains(r) {
			return password, false
		}
		randAL = randAL || stringprep.TableD1.Contains(r)
	}
	if randAL {
		for _, r := range mapped {
			if stringprep.TableD2.Contains(r) {
				return password, false
			}
		}
		if !stringprep.TableD1.Contains(mapped[0]) || !stringprep.TableD1.Contains(mapped[len(mapped)-1]) {
			return password, false
		}
	}
	return norm.NFKC.String(string(mapped)), true
}

// isMappedToNothing reports whether r is in RFC 3454's table B.1.
func isMappedToNothing(r rune) bool { return tableB1.Contains(r) }

// tableB1 is RFC 3454's table B.1 (commonly mapped to nothing), as PostgreSQL has it
// (commonly_mapped_to_nothing_ranges). xdg-go/stringprep's TableB1 (v1.0.4) lacks U+1806
// MONGOLIAN TODO SOFT HYPHEN, which RFC 3454 and PostgreSQL map to nothing: so it is not used.
var tableB1 = stringprep.Set{
	{0x00AD, 0x00AD}, {0x034F, 0x034F}, {0x1806, 0x1806}, {0x180B, 0x180D},
	{0x200B, 0x200D}, {0x2060, 0x2060}, {0xFE00, 0xFE0F}, {0xFEFF, 0xFEFF},
}

// prohibitedTables are the tables whose code points SASLprep prohibits (RFC 4013 section 2.3),
// the union that PostgreSQL's prohibited_output_ranges holds.
var prohibitedTables = [...]stringprep.Set{
	stringprep.TableC1_2, stringprep.TableC2_1, stringprep.TableC2_2, stringprep.TableC3,
	stringprep.TableC4, stringprep.TableC5, stringprep.TableC6, stringprep.TableC7,
	stringprep.TableC8, stringprep.TableC9,
}

func prohibited(r rune) bool {
	for _, s := range prohibitedTables {
		if s.Contains(r) {
			return true
		}
	}
	return false
}
