package harness

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	_ = Cleanup()
	os.Exit(code)
}
