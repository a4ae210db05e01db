package negotiate

import (
	"os"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

func TestMain(m *testing.M) {
	// No Kerberos credentials from the machine: the GSS tests start their own KDC and give the
	// connector (WithKerberos) and psql (KDC.Env) their credential cache.
	os.Setenv("KRB5CCNAME", "FILE:/nonexistent/pgconnector-test-ccache")
	os.Setenv("KRB5_CLIENT_KTNAME", "")
	os.Exit(harness.Run(m)) // stops the servers and KDCs too
}
