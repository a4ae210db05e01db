package auth

import (
	"os"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }
