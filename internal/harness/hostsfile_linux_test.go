package harness

import (
	"context"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The child sees the hosts file; the machine's /etc/hosts is as it was.
func TestRunInChildProcessWithHosts(t *testing.T) {
	const name = "pgconnector-hosts-test.invalid"
	if IsChildProcess(t) {
		addrs, err := net.DefaultResolver.LookupHost(context.Background(), name)
		if err != nil || !reflect.DeepEqual(addrs, []string{"127.0.0.7", "127.0.0.8"}) {
			t.Fatalf("%s resolves to %v (%v), want 127.0.0.7 and 127.0.0.8", name, addrs, err)
		}
		return
	}
	t.Parallel()
	before, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	out, passed := RunInChildProcessWithHosts(t, time.Minute, "127.0.0.7 "+name+"\n127.0.0.8 "+name+"\n")
	if !passed {
		t.Fatalf("the child failed:\n%s", out)
	}
	after, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) || strings.Contains(string(after), name) {
		t.Errorf("/etc/hosts changed:\n%s", after)
	}
}
