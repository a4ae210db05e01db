package e2e

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// The quickstart and the Jaeger example, run without DATABASE_URL, start a throwaway cluster (and,
// with -jaeger, a Jaeger): when they end, by themselves or by Ctrl-C, nothing of it is left in
// /dev/shm or the temporary directory (the initdb template included) and nothing of it runs.
func TestExamplesLeaveNothingBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	if _, err := harness.JaegerBinary(ctx, t.Logf); err != nil { // built once, then cached
		t.Fatal(err)
	}
	quickstart := buildExample(t, "github.com/pgconnector/pgconnector/examples/quickstart")
	jaeger := buildExample(t, "github.com/pgconnector/pgconnector/examples/jaeger")
	for _, tt := range []struct {
		name      string
		cmd       []string
		interrupt string // Ctrl-C once a line with this text is printed; "": the program ends by itself
		exit      int    // the program's exit status
		says      string // a line of its output
	}{
		{name: "quickstart", cmd: []string{quickstart, "-v"}, says: "== span tree"},
		// Ctrl-C while the cluster is being made (initdb takes the best part of a second).
		{name: "quickstart interrupted", cmd: []string{quickstart}, interrupt: "starting a throwaway", exit: 130, says: "quickstart: interrupted"},
		{name: "jaeger -once", cmd: []string{jaeger, "-jaeger", "-once", "-listen", "127.0.0.1:0"}, says: "spans flushed"},
		{name: "jaeger interrupted", cmd: []string{jaeger, "-jaeger", "-listen", "127.0.0.1:0"}, interrupt: "serving ", says: "stopping"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rctx, rcancel := context.WithTimeout(ctx, 3*time.Minute)
			defer rcancel()
			cmd := exec.CommandContext(rctx, tt.cmd[0], tt.cmd[1:]...)
			cmd.Env = environ() // no DATABASE_URL: the program starts its own cluster
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var log strings.Builder
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
				if tt.interrupt != "" && strings.Contains(sc.Text(), tt.interrupt) {
					// Its harness directory appears (else the check below proves nothing).
					for i := 0; len(harness.Leftovers(cmd.Process.Pid, 0)) == 0; i++ {
						if i == 1000 {
							t.Fatalf("no harness directory of the running program was found:\n%s", log.String())
						}
						time.Sleep(5 * time.Millisecond)
					}
					if err := cmd.Process.Signal(os.Interrupt); err != nil {
						t.Fatal(err)
					}
				}
			}
			_ = cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != tt.exit || !strings.Contains(log.String(), tt.says) {
				t.Errorf("exit status %d, want %d and a line with %q:\n%s", got, tt.exit, tt.says, log.String())
			}
			if left := harness.Leftovers(cmd.Process.Pid, 30*time.Second); len(left) > 0 {
				t.Errorf("left behind: %v\n%s", left, log.String())
			}
			// The quickstart says where its cluster was: the base directory holding it is gone.
			if _, after, ok := strings.Cut(log.String(), ", data in "); ok {
				data, _, _ := strings.Cut(after, "\n")
				base := filepath.Dir(filepath.Dir(data)) // BASE/cluster-*/data
				if !strings.HasPrefix(filepath.Base(base), "pgconnector-harness-") {
					t.Errorf("the cluster's data directory %s is not in a harness directory", data)
				} else if _, err := os.Stat(base); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s is still there (%v)", base, err)
				}
			} else if tt.name == "quickstart" {
				t.Errorf("the quickstart did not say where its cluster was:\n%s", log.String())
			}
		})
	}
}
