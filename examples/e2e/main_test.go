package e2e

import (
	"os"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, Jaeger, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }
