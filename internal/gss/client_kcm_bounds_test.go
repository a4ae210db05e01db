package gss

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/pgconnector/pgconnector/internal/ccache"
)

// kcmFake serves KCM on a private Unix socket for a cache "7" of carol@FAKE.TEST with a
// ticket-granting ticket, as Heimdal's kcm does (no GET_CRED_LIST), each answer after
// delay(op) (negative: never). It counts the requests by opcode.
type kcmFake struct {
	krb5Conf string
	ops      [32]atomic.Int32
}

func startKCMFake(t *testing.T, delay func(op uint16) time.Duration) *kcmFake {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "kcm.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &kcmFake{krb5Conf: filepath.Join(dir, "krb5.conf")}
	if err := os.WriteFile(f.krb5Conf, []byte("[libdefaults]\n    default_realm = FAKE.TEST\n    kcm_socket = "+sock+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := func(b, d []byte) []byte { return append(binary.BigEndian.AppendUint32(b, uint32(len(d))), d...) }
	princ := func(comps ...string) []byte {
		b := binary.BigEndian.AppendUint32(nil, 1)
		b = binary.BigEndian.AppendUint32(b, uint32(len(comps)))
		b = data(b, []byte("FAKE.TEST"))
		for _, c := range comps {
			b = data(b, []byte(c))
		}
		return b
	}
	client := princ("carol")
	cred := append(append([]byte{}, client...), princ("krbtgt", "FAKE.TEST")...)
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
	reply := func(status int32, result []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(4+len(result)))
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(status))
		return append(b, result...)
	}
	answers := map[uint16][]byte{
		20: reply(0, []byte("7\x00")),  // GET_DEFAULT_CACHE
		8:  reply(0, client),           // GET_PRINCIPAL
		9:  reply(0, make([]byte, 16)), // GET_CRED_UUID_LIST: one UUID
		10: reply(0, cred),             // GET_CRED_BY_UUID
		0:  reply(-1765328188, nil),    // anything else: KRB5_FCC_INTERNAL
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		close(stop)
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() {
				defer conn.Close()
				for {
					var hdr [8]byte
					if _, err := io.ReadFull(conn, hdr[:]); err != nil {
						return
					}
					rest := make([]byte, binary.BigEndian.Uint32(hdr[:4])-4)
					if _, err := io.ReadFull(conn, rest); err != nil {
						return
					}
					op := binary.BigEndian.Uint16(hdr[6:])
					f.ops[op%32].Add(1)
					d := delay(op)
					if d < 0 {
						<-stop
						return
					}
					select {
					case <-time.After(d):
					case <-stop:
						return
					}
					a, ok := answers[op]
					if !ok {
						a = answers[0]
					}
					if _, err := conn.Write(a); err != nil {
						return
					}
				}
			})
		}
	})
	return f
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
	c := NewClient(ClientConfig{Krb5Conf: f.krb5Conf, CCache: "KCM:"})
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
	c := NewClient(ClientConfig{Krb5Conf: f.krb5Conf, CCache: "KCM:"})
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
	if n := f.ops[8].Load(); n != 1 {
		t.Errorf("%d reads of the cache (GET_PRINCIPAL) for 8 concurrent checks, want 1", n)
	}
}
