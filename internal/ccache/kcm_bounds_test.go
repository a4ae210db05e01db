package ccache

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// A KCM daemon is untrusted input: these fakes misbehave as the real Heimdal kcm will not on
// demand, to check the bounds of a request sequence (see kcmCache).

// credWithTicket is a version 4 credential record for server whose ticket is n bytes.
func credWithTicket(server []byte, n int) []byte {
	b := slices.Concat(fakeClient, server)
	b = binary.BigEndian.AppendUint16(b, 18)
	b = harness.KCMData(b, make([]byte, 32))
	for _, ts := range []uint32{1, 1, uint32(fakeEnd.Unix()), 0} {
		b = binary.BigEndian.AppendUint32(b, ts)
	}
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0) // addresses
	b = binary.BigEndian.AppendUint32(b, 0) // authdata
	b = harness.KCMData(b, make([]byte, n))
	return harness.KCMData(b, nil)
}

// uuidDaemon answers like Heimdal's kcm (no GET_CRED_LIST) for one cache "7" of n credentials,
// each reply to GET_CRED_BY_UUID being cred (sent as is: the fake allocates nothing per
// request), each answer after wait.
func uuidDaemon(n int, cred []byte, wait time.Duration) func(op uint16, args []byte) []byte {
	uuids := make([]byte, 16*n)
	for i := range n {
		binary.BigEndian.PutUint32(uuids[16*i:], uint32(i+1))
	}
	defName, princ, list, unsupported := kcmReply([]byte("7\x00")), kcmReply(fakeClient), kcmReply(uuids), kcmStatus(codeFCCInternal, nil)
	rep := kcmReply(cred)
	return func(op uint16, args []byte) []byte {
		time.Sleep(wait)
		switch op {
		case kcmOpGetDefaultCache:
			return defName
		case kcmOpGetPrincipal:
			return princ
		case kcmOpGetCredUUIDList:
			return list
		case kcmOpGetCredByUUID:
			return rep
		}
		return unsupported
	}
}

// A daemon that answers each request in 300 ms, well within KCMTimeout (1 s here), for a cache
// of 20 credentials (24 requests, 7.2 s): the read shares one deadline, KCMTimeout from its
// start, instead of taking KCMTimeout per request; the error says that no answer came, wraps
// os.ErrDeadlineExceeded and names the request. The daemon's next sequence starts afresh.
func TestKCMFakeSlowDaemonOneDeadline(t *testing.T) {
	old := KCMTimeout
	KCMTimeout = time.Second
	t.Cleanup(func() { KCMTimeout = old })
	tgt := credRecord(fakeClient, harness.KCMPrincipal(fakeRealm, "krbtgt", fakeRealm), fakeEnd)
	var slow atomic.Bool
	slow.Store(true)
	fast, late := uuidDaemon(20, tgt, 0), uuidDaemon(20, tgt, 300*time.Millisecond)
	f := startFakeKCM(t, func(op uint16, args []byte) []byte {
		if slow.Load() {
			return late(op, args)
		}
		return fast(op, args)
	})
	c := resolveFake(t, f, "KCM:")
	t.Cleanup(func() { c.Close() })
	start := time.Now()
	_, err := c.Load(context.Background())
	took := time.Since(start)
	if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 1s (KCMTimeout, for the whole request sequence)") {
		t.Errorf("Load: %v, want no answer within KCMTimeout for the sequence", err)
	}
	if took > KCMTimeout+time.Second {
		t.Errorf("Load returned after %v with KCMTimeout %v: a deadline per request", took.Round(time.Millisecond), KCMTimeout)
	}
	if ops := f.Ops(); len(ops) >= 24 {
		t.Errorf("%d requests: the whole cache was read", len(ops))
	}
	slow.Store(false)
	cc, err := c.Load(context.Background())
	if err != nil || len(cc.Credentials) != 20 {
		t.Fatalf("Load from a prompt daemon: %v", err)
	}
}

// A daemon that answers with ever more large credentials: the read stops at kcmMaxLoad with
// an error naming it, and what it allocates is bounded by it, not by what the daemon sends
// (64 credentials of 1 MiB here; before the bound every reply was kept, then copied again).
func TestKCMFakeLargeCredentialsBounded(t *testing.T) {
	const n, size = 64, 1 << 20
	big := credWithTicket(harness.KCMPrincipal(fakeRealm, "krbtgt", fakeRealm), size)
	f := startFakeKCM(t, uuidDaemon(n, big, 0))
	c := resolveFake(t, f, "KCM:")
	t.Cleanup(func() { c.Close() })
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := c.Load(context.Background())
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "over the limit of 16777216 bytes for one read of the cache") ||
		!errors.Is(err, errTooLarge) {
		t.Errorf("Load: %v, want the bound of one read", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("Load allocated %d MiB for a daemon sending %d MiB", alloc>>20, n*size>>20)
	if alloc > 3*kcmMaxLoad {
		t.Errorf("Load allocated %d MiB, over 3 x kcmMaxLoad (%d MiB)", alloc>>20, 3*kcmMaxLoad>>20)
	}
	// The connection is not in step (the reply over the bound was left unread): closed.
	if conn, _ := c.(*kcmCache).connection(); conn != nil {
		t.Error("the connection is kept after a reply over the bound")
	}
}

// The bounds on counts: a GET_CRED_LIST count and a GET_CRED_UUID_LIST over kcmMaxCreds are
// refused before any credential is read, with an error naming the bound.
func TestKCMFakeTooManyCredentials(t *testing.T) {
	tooMany := make([]byte, 4+4*(kcmMaxCreds+1)) // count, then that many empty records
	binary.BigEndian.PutUint32(tooMany, kcmMaxCreds+1)
	for _, tt := range []struct {
		name string
		op   uint16
		rep  []byte
	}{
		{"GET_CRED_LIST", kcmOpGetCredList, kcmReply(tooMany)},
		{"GET_CRED_UUID_LIST", kcmOpGetCredUUIDList, kcmReply(make([]byte, 16*(kcmMaxCreds+1)))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := fakeHandler(nil, kcmStatus(codeFCCInternal, nil))
			f := startFakeKCM(t, func(op uint16, args []byte) []byte {
				if op == tt.op {
					return tt.rep
				}
				return h(op, args)
			})
			c := resolveFake(t, f, "KCM:")
			t.Cleanup(func() { c.Close() })
			_, err := c.Load(context.Background())
			if !errors.Is(err, errTooLarge) || !strings.Contains(err.Error(), "credentials, over the limit of 65536") {
				t.Errorf("Load: %v, want the bound on credentials", err)
			}
			if ops := f.Ops(); slices.Contains(ops, kcmOpGetCredByUUID) {
				t.Errorf("requests %v: credentials read after the count", ops)
			}
		})
	}
}
