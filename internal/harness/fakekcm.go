package harness

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// FakeKCM is a KCM daemon on a private Unix socket that answers as a test says, for what a real
// daemon (KCMT) will not do on demand: answer late or never, hang up mid-reply, send malformed
// or huge replies. It speaks MIT's KCM framing (src/lib/krb5/ccache/cc_kcm.c, kcm.h): a request
// is a u32 big-endian length, then the version 2.0 (two bytes), the u16 op code and its
// arguments; a reply is a u32 length, then its bytes.
type FakeKCM struct {
	// Socket is the path of the daemon's Unix socket.
	Socket string
	// Krb5Conf is the path of a krb5.conf with default_realm FAKE.TEST and kcm_socket Socket.
	Krb5Conf string

	mu      sync.Mutex
	ops     []uint16
	accepts int
	eofs    int
}

// KCMHangUp, at the end of a reply from FakeKCMT's answer, makes the daemon write the reply
// without it and then close the connection.
var KCMHangUp = []byte("\xffhang up")

// FakeKCMT starts a FakeKCM that lives until t's cleanup. For each request, answer gets its op
// code and arguments and returns the reply (whole: length and body, see KCMReply) and how long
// to wait before writing it: a nil reply closes the connection without an answer; a negative
// wait never answers, and the daemon reads the connection on until the client closes it (see
// ClosedByPeer) or the cleanup. A request that is not version 2.0 closes the connection. At
// cleanup the daemon closes its listener and connections, and waits for its goroutines and
// for the answer calls under way.
func FakeKCMT(t testing.TB, answer func(op uint16, args []byte) (reply []byte, wait time.Duration)) *FakeKCM {
	t.Helper()
	dir := t.TempDir()
	f := &FakeKCM{Socket: filepath.Join(dir, "kcm.sock"), Krb5Conf: filepath.Join(dir, "krb5.conf")}
	conf := "[libdefaults]\n    default_realm = FAKE.TEST\n    kcm_socket = " + f.Socket + "\n"
	if err := os.WriteFile(f.Krb5Conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", f.Socket)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var connsMu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		close(stop)
		ln.Close()
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			connsMu.Lock()
			conns = append(conns, conn)
			connsMu.Unlock()
			f.mu.Lock()
			f.accepts++
			f.mu.Unlock()
			wg.Go(func() { f.serve(conn, answer, stop) })
		}
	})
	return f
}

func (f *FakeKCM) serve(conn net.Conn, answer func(uint16, []byte) ([]byte, time.Duration), stop <-chan struct{}) {
	defer conn.Close()
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			f.peerClosed(err)
			return
		}
		req := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(conn, req); err != nil || len(req) < 4 || req[0] != 2 || req[1] != 0 {
			return
		}
		op := binary.BigEndian.Uint16(req[2:])
		f.mu.Lock()
		f.ops = append(f.ops, op)
		f.mu.Unlock()
		reply, wait := answer(op, req[4:])
		if wait < 0 {
			_, err := io.Copy(io.Discard, conn)
			f.peerClosed(err)
			return
		}
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-stop:
				return
			}
		}
		if reply == nil {
			return
		}
		reply, hangup := bytes.CutSuffix(reply, KCMHangUp)
		if _, err := conn.Write(reply); err != nil || hangup {
			return
		}
	}
}

// peerClosed counts a read that ended with err nil or io.EOF: the client closed its end.
func (f *FakeKCM) peerClosed(err error) {
	if err == nil || errors.Is(err, io.EOF) {
		f.mu.Lock()
		f.eofs++
		f.mu.Unlock()
	}
}

// Ops returns the op codes of the requests received so far, in order.
func (f *FakeKCM) Ops() []uint16 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ops)
}

// Accepts returns the number of connections accepted so far.
func (f *FakeKCM) Accepts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepts
}

// ClosedByPeer returns the number of connections the daemon has read to their end (EOF): the
// client closed them.
func (f *FakeKCM) ClosedByPeer() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.eofs
}

// KCMReply frames a KCM reply as MIT's and Heimdal's daemons send it: u32 length, u32 outer
// code 0, u32 op status (0, or a krb5 error code such as KRB5_FCC_INTERNAL), then result.
func KCMReply(status int32, result []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(result)))
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(status))
	return append(b, result...)
}

// KCMData appends a data field of a version 4 ccache record (MIT ccmarshal.c, put_data): u32
// big-endian length, then d.
func KCMData(b, d []byte) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(d))), d...)
}

// KCMPrincipal is a version 4 principal record as KCM replies carry it (MIT ccmarshal.c,
// k5_marshal_princ): name type 1 (NT-PRINCIPAL), u32 component count, realm, components.
func KCMPrincipal(realm string, comps ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(len(comps)))
	b = KCMData(b, []byte(realm))
	for _, c := range comps {
		b = KCMData(b, []byte(c))
	}
	return b
}
