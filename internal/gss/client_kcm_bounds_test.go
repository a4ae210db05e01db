package gss

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"

	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/pgconnector/pgconnector/internal/ccache"
)

// startKCMFake starts a harness.FakeKCM for a cache "7" of carol@FAKE.TEST with a
// ticket-granting ticket, as Heimdal's kcm does (no GET_CRED_LIST), each answer after
// delay(op) (negative: never).
func startKCMFake(t *testing.T, delay func(op uint16) time.Duration) *harness.FakeKCM {
	t.Helper()
	data := harness.KCMData
	client := harness.KCMPrincipal("FAKE.TEST", "carol")
	cred := append(append([]byte{}, client...), harness.KCMPrincipal("FAKE.TEST", "krbtgt", "FAKE.TEST")...)
	cred = binary.BigEndian.AppendUint16(cred, 18)
	cred = data(cred, make([]byte, 32))
	end := time.Now().Add(10 * time.Hour)
	for _, ts := range []int64{end.Add(-time.Hour).Unix(), end.Add(-time.Hour).Unix(), end.Unix(), end.Unix()} {
		cred = binary.BigEndian.AppendUint32(cred, uint32(ts))
	}
	cred = append(cred, 0)
	cred = binary.BigEndian.AppendUint32(cred, 0x40e00000)
	cred = binary.BigEndian.AppendUint64(cred, 0) // no addresses, no authdata
	tkt, err := (&messages.Ticket{TktVNO: 5, Realm: "FAKE.TEST", SName: types.NewPrincipalName(2, "krbtgt/FAKE.TEST"),
		EncPart: types.EncryptedData{EType: 18, Cipher: make([]byte, 64)}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cred = data(cred, tkt)
	cred = data(cred, nil)
	answers := map[uint16][]byte{
		20: harness.KCMReply(0, []byte("7\x00")),  // GET_DEFAULT_CACHE
		8:  harness.KCMReply(0, client),           // GET_PRINCIPAL
		9:  harness.KCMReply(0, make([]byte, 16)), // GET_CRED_UUID_LIST: one UUID
		10: harness.KCMReply(0, cred),             // GET_CRED_BY_UUID
		0:  harness.KCMReply(-1765328188, nil),    // anything else: KRB5_FCC_INTERNAL
	}
	return harness.FakeKCMT(t, func(op uint16, _ []byte) ([]byte, time.Duration) {
		a, ok := answers[op]
		if !ok {
			a = answers[0]
		}
		return a, delay(op)
	})
}

// A KCM daemon that does not answer within ccache.KCMTimeout: Credentials, with no deadline of
// its own, returns an error that wraps os.ErrDeadlineExceeded, and decides nothing from it (no
// "no credentials" that gssencmode=prefer would take to go without GSS encryption): the
// decision made before stays.
func TestCredentialsKCMTimeoutDecidesNothing(t *testing.T) {
	old := ccache.KCMTimeout
	ccache.KCMTimeout = 300 * time.Millisecond
	t.Cleanup(func() { ccache.KCMTimeout = old })
	var hang atomic.Bool
	f := startKCMFake(t, func(op uint16) time.Duration {
		if hang.Load() {
			return -1
		}
		return 0
	})
	c := NewClient(ClientConfig{Krb5Conf: f.Krb5Conf, CCache: "KCM:"})
	t.Cleanup(func() { c.Close() })
	creds, err := c.Credentials(context.Background())
	if err != nil || !creds.Valid {
		t.Fatalf("Credentials from a prompt daemon: %+v, %v", creds, err)
	}
	hang.Store(true)
	creds, err = c.Credentials(context.Background())
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Credentials from a daemon that does not answer: %+v, %v; want an error that wraps os.ErrDeadlineExceeded", creds, err)
	}
	if cur := c.cur.Load(); cur == nil || cur.creds == nil || c.noCreds.Load() {
		t.Errorf("the decision after a timed-out check: %+v, want the previous one (credentials)", cur)
	}
}

// Concurrent checks that find the cache changed share one read of it: one GET_PRINCIPAL for
// eight callers, and each gets the credentials.
func TestCredentialsKCMSharedRead(t *testing.T) {
	f := startKCMFake(t, func(op uint16) time.Duration {
		if op == 8 { // GET_PRINCIPAL: the read, after the stamp
			return 300 * time.Millisecond
		}
		return 0
	})
	c := NewClient(ClientConfig{Krb5Conf: f.Krb5Conf, CCache: "KCM:"})
	t.Cleanup(func() { c.Close() })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			creds, err := c.Credentials(context.Background())
			if err != nil || !creds.Valid {
				t.Errorf("Credentials: %+v, %v", creds, err)
			}
		})
	}
	wg.Wait()
	if n := countOp(f.Ops(), 8); n != 1 {
		t.Errorf("%d reads of the cache (GET_PRINCIPAL) for 8 concurrent checks, want 1", n)
	}
}

// countOp is the number of requests with op code op in ops.
func countOp(ops []uint16, op uint16) int {
	n := 0
	for _, o := range ops {
		if o == op {
			n++
		}
	}
	return n
}
