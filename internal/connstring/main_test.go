package connstring

import (
	"os"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// TestMain removes what the harness made (libpq 18's parse program, TestURIReadingMatchesLibpq)
// when the tests end.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }
