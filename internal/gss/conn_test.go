package gss

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/pgconnector/pgconnector/negotiation"
)

// connPair returns the two ends of a GSS-encrypted net.Pipe: the client end
// has the initiator's Wrapper, the server end the acceptor's.
func connPair(t testing.TB, enctype int32) (client, server net.Conn) {
	t.Helper()
	ini, acc := pair(t, randomKey(t, enctype), true, 1000, 2000)
	c, s := net.Pipe()
	t.Cleanup(func() { c.Close(); s.Close() })
	return NewConn(c, ini), NewConn(s, acc)
}

// transfer writes data on w in one Write and reads it back on r.
func transfer(t *testing.T, w, r net.Conn, data []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		n, err := w.Write(data)
		if err == nil && n != len(data) {
			err = fmt.Errorf("short write %d of %d", n, len(data))
		}
		errc <- err
	}()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("reading %d bytes: %v", len(data), err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("writing %d bytes: %v", len(data), err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("%d bytes: data differs", len(data))
	}
}

func TestConnRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 16<<10 + 1, 1 << 20}
	if !testing.Short() {
		sizes = append(sizes, 64<<20)
	}
	for _, enctype := range allEnctypes {
		t.Run(EnctypeName(enctype), func(t *testing.T) {
			client, server := connPair(t, enctype)
			for _, n := range sizes {
				if n == 64<<20 && enctype != 18 {
					continue // the large transfer once, for aes256-sha1
				}
				data := randomBytes(t, n)
				transfer(t, client, server, data)
				transfer(t, server, client, data)
			}
			// Reads serve a packet across calls, in small pieces.
			data := randomBytes(t, 5000)
			go client.Write(data)
			var got []byte
			buf := make([]byte, 7)
			for len(got) < len(data) {
				n, err := server.Read(buf)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, buf[:n]...)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("data read in 7-byte pieces differs")
			}
		})
	}
}

// The packets on the wire: Int32 length + one token, every token at most
// MaxPacket-4 bytes, full packets exactly as large as the plaintext chunk
// allows, and nothing at all for an empty Write.
func TestConnPacketFraming(t *testing.T) {
	for _, enctype := range allEnctypes {
		key := randomKey(t, enctype)
		ini, acc := pair(t, key, true, 0, 0)
		c, s := net.Pipe()
		conn := NewConn(c, ini)
		data := randomBytes(t, 40000)
		go func() {
			conn.Write(nil)
			conn.Write(data)
			c.Close()
		}()
		var got []byte
		var sizes []int
		for {
			tok, err := ReadToken(s, MaxAuthPacket)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				break
			}
			sizes = append(sizes, len(tok))
			pt, err := acc.Unwrap(nil, tok)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, pt...)
		}
		s.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: reassembled data differs", EnctypeName(enctype))
		}
		chunk := ini.MaxPlaintext(MaxPacket - 4)
		want := []int{MaxPacket - 4, MaxPacket - 4, 40000 - 2*chunk + ini.Overhead()}
		if fmt.Sprint(sizes) != fmt.Sprint(want) {
			t.Errorf("%s: packet sizes %v, want %v", EnctypeName(enctype), sizes, want)
		}
	}
}

func TestConnConcurrentReadWrite(t *testing.T) {
	client, server := connPair(t, 18)
	const total = 4 << 20
	up, down := randomBytes(t, total), randomBytes(t, total)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	write := func(c net.Conn, data []byte) {
		defer wg.Done()
		for off := 0; off < len(data); {
			n := min(len(data)-off, 1+(off*7)%70000) // varied write sizes
			if _, err := c.Write(data[off : off+n]); err != nil {
				errs <- err
				return
			}
			off += n
		}
	}
	read := func(c net.Conn, want []byte) {
		defer wg.Done()
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got); err != nil {
			errs <- err
			return
		}
		if !bytes.Equal(got, want) {
			errs <- errors.New("concurrent transfer: data differs")
		}
	}
	wg.Add(4)
	go write(client, up)
	go read(server, up)
	go write(server, down)
	go read(client, down)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// rawPacket frames a sealed token as NewConn does.
func rawPacket(t testing.TB, w *Wrapper, pt []byte) []byte {
	t.Helper()
	tok := mustWrap(t, w, pt)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(tok))), tok...)
}

// A read deadline expiring in the middle of a packet (and in the middle of
// its length word) loses nothing: the next Read completes the packet.
func TestConnReadTimeoutResumes(t *testing.T) {
	ini, acc := pair(t, randomKey(t, 18), true, 0, 0)
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	conn := NewConn(c, ini)
	data := randomBytes(t, 10000)
	pkt1 := rawPacket(t, acc, data)
	pkt2 := rawPacket(t, acc, []byte("second packet"))
	cuts := [][]byte{pkt1[:2], pkt1[2:5000], pkt1[5000:], pkt2[:3], pkt2[3:]}

	wrote := make(chan error)
	got := make([]byte, 0, len(data)+13)
	buf := make([]byte, 64<<10)
	for i, part := range cuts {
		go func() {
			_, err := s.Write(part)
			wrote <- err
		}()
		// Read until the writer's part has been consumed and the reader
		// blocks for more; then the deadline fires.
		if err := conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		for {
			n, err := conn.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("part %d: %v, want a timeout", i, err)
				}
				break
			}
		}
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
	}
	conn.SetReadDeadline(time.Time{})
	want := append(bytes.Clone(data), "second packet"...)
	if !bytes.Equal(got, want) {
		t.Fatalf("after timeouts: got %d bytes, want %d, equal=%t", len(got), len(want), bytes.Equal(got, want))
	}
}

func TestConnRejectsBadPackets(t *testing.T) {
	ini, acc := pair(t, randomKey(t, 18), true, 0, 0)
	good := rawPacket(t, acc, []byte("ok"))
	tampered := bytes.Clone(good)
	tampered[30] ^= 0x40
	cases := []struct {
		name string
		wire []byte
		want error
		text string
	}{
		{"oversized length", binary.BigEndian.AppendUint32(nil, MaxPacket-3), nil, "out of range"},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff}, nil, "out of range"},
		{"zero length", []byte{0, 0, 0, 0}, nil, "out of range"},
		{"tampered token", tampered, ErrIntegrity, ""},
		{"token from ourselves", rawPacket(t, ini, []byte("reflected")), ErrDirection, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A fresh wrapper pair with the same key: sequence numbers from 0.
			ini2, acc2 := pair(t, ini.keyValueKey(), true, 0, 0)
			_ = acc2
			cc, s := net.Pipe()
			defer cc.Close()
			defer s.Close()
			conn := NewConn(cc, ini2)
			go s.Write(append(bytes.Clone(c.wire), make([]byte, 100)...))
			_, err := conn.Read(make([]byte, 100))
			if err == nil {
				t.Fatal("Read accepted the packet")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if c.text != "" && !strings.Contains(err.Error(), c.text) {
				t.Fatalf("error %q, want %q", err, c.text)
			}
			// Sticky: the stream cannot be trusted any more.
			if _, err2 := conn.Read(make([]byte, 1)); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("second Read: %v, want %v", err2, err)
			}
		})
	}
	_ = good
}

// keyValueKey returns the Wrapper's key (test helper only).
func (w *Wrapper) keyValueKey() types.EncryptionKey {
	return types.EncryptionKey{KeyType: w.enctype, KeyValue: bytes.Clone(w.keyValue)}
}

func TestConnEOF(t *testing.T) {
	ini, acc := pair(t, randomKey(t, 17), true, 0, 0)
	pkt := rawPacket(t, acc, []byte("last words"))
	for _, c := range []struct {
		name string
		wire []byte
		want error
	}{
		{"at a packet boundary", pkt, io.EOF},
		{"inside the length", pkt[:2], io.ErrUnexpectedEOF},
		{"inside the token", pkt[:20], io.ErrUnexpectedEOF},
	} {
		ini2, _ := pair(t, ini.keyValueKey(), true, 0, 0)
		cc, s := net.Pipe()
		conn := NewConn(cc, ini2)
		go func() { s.Write(c.wire); s.Close() }()
		got, err := io.ReadAll(conn)
		if c.want == io.EOF {
			if err != nil || string(got) != "last words" {
				t.Errorf("%s: %q, %v", c.name, got, err)
			}
		} else if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		cc.Close()
	}
}

// recConn records what NewConn forwards to the raw connection.
type recConn struct {
	net.Conn
	mu       sync.Mutex
	calls    []string
	writeErr error
	writes   int
	closed   bool
}

type addr string

func (a addr) Network() string { return "test" }
func (a addr) String() string  { return string(a) }

func (r *recConn) record(s string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
	return nil
}
func (r *recConn) SetDeadline(t time.Time) error      { return r.record("deadline " + t.UTC().String()) }
func (r *recConn) SetReadDeadline(t time.Time) error  { return r.record("read " + t.UTC().String()) }
func (r *recConn) SetWriteDeadline(t time.Time) error { return r.record("write " + t.UTC().String()) }
func (r *recConn) LocalAddr() net.Addr                { return addr("local") }
func (r *recConn) RemoteAddr() net.Addr               { return addr("remote") }
func (r *recConn) Close() error                       { r.closed = true; return nil }
func (r *recConn) Write(p []byte) (int, error) {
	r.writes++
	if r.writeErr != nil {
		return len(p) / 2, r.writeErr
	}
	return len(p), nil
}

func TestConnForwardsToRaw(t *testing.T) {
	ini, _ := pair(t, randomKey(t, 18), true, 0, 0)
	raw := &recConn{}
	conn := NewConn(raw, ini)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	conn.SetDeadline(t0)
	conn.SetReadDeadline(t0.Add(time.Second))
	conn.SetWriteDeadline(t0.Add(2 * time.Second))
	want := []string{"deadline " + t0.String(), "read " + t0.Add(time.Second).String(), "write " + t0.Add(2*time.Second).String()}
	if fmt.Sprint(raw.calls) != fmt.Sprint(want) {
		t.Errorf("deadline calls %v, want %v", raw.calls, want)
	}
	if conn.LocalAddr().String() != "local" || conn.RemoteAddr().String() != "remote" {
		t.Errorf("addresses %v %v", conn.LocalAddr(), conn.RemoteAddr())
	}
	if err := conn.Close(); err != nil || !raw.closed {
		t.Errorf("Close: %v, raw closed %t", err, raw.closed)
	}
}

// A failed raw write may have cut a packet: every later Write fails too.
func TestConnWriteErrorIsSticky(t *testing.T) {
	ini, _ := pair(t, randomKey(t, 18), true, 0, 0)
	raw := &recConn{writeErr: os.ErrDeadlineExceeded}
	conn := NewConn(raw, ini)
	n, err := conn.Write([]byte("hello"))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	raw.writeErr = nil
	if _, err2 := conn.Write([]byte("again")); !errors.Is(err2, os.ErrDeadlineExceeded) {
		t.Fatalf("second Write: %v", err2)
	}
	if raw.writes != 1 {
		t.Errorf("raw.Write called %d times, want 1", raw.writes)
	}
	// Bytes of packets that went out whole are reported.
	raw2 := &recConn{}
	conn2 := NewConn(raw2, ini)
	big := make([]byte, 3*ini.MaxPlaintext(MaxPacket-4))
	if n, err := conn2.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if raw2.writes != 3 {
		t.Errorf("%d packets, want 3", raw2.writes)
	}
}

func TestWriteReadToken(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteToken(&buf, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), []byte{0, 0, 0, 3, 'a', 'b', 'c'}) {
		t.Fatalf("wire % x", buf.Bytes())
	}
	tok, err := ReadToken(&buf, 3)
	if err != nil || string(tok) != "abc" {
		t.Fatalf("ReadToken: %q, %v", tok, err)
	}
	if err := WriteToken(&buf, nil); err == nil {
		t.Error("empty token written")
	}
	if err := WriteToken(&buf, make([]byte, MaxAuthPacket-3)); err == nil {
		t.Error("oversized token written")
	}
	if buf.Len() != 0 {
		t.Errorf("rejected tokens wrote %d bytes", buf.Len())
	}
	for _, c := range []struct {
		name string
		wire []byte
		max  int
		want string
		is   error
	}{
		{"longer than max", []byte{0, 0, 0, 4, 1, 2, 3, 4}, 3, "out of range", nil},
		{"absurd length", []byte{0x7f, 0xff, 0xff, 0xff}, MaxAuthPacket - 4, "out of range", nil},
		{"zero length", []byte{0, 0, 0, 0}, 10, "out of range", nil},
		{"ErrorResponse", []byte("EFATAL: unauthenticated text"), 100, "", ErrServerErrorResponse},
		{"truncated length", []byte{0, 0}, 10, "", io.ErrUnexpectedEOF},
		{"truncated token", []byte{0, 0, 0, 5, 1}, 10, "", io.ErrUnexpectedEOF},
		{"nothing", nil, 10, "", io.EOF},
		{"bad max", []byte{0, 0, 0, 1, 1}, 0, "invalid maximum", nil},
	} {
		tok, err := ReadToken(bytes.NewReader(c.wire), c.max)
		if err == nil {
			t.Errorf("%s: ReadToken = %x, want an error", c.name, tok)
			continue
		}
		if c.want != "" && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		}
		if strings.Contains(err.Error(), "unauthenticated") {
			t.Errorf("%s: error repeats the server's text: %v", c.name, err)
		}
	}
}

// BenchmarkConnThroughput measures encrypted transfer over net.Pipe, one
// writer and one reader, in 64 KiB writes.
func BenchmarkConnThroughput(b *testing.B) {
	for _, enctype := range allEnctypes {
		b.Run(EnctypeName(enctype), func(b *testing.B) {
			client, server := connPair(b, enctype)
			data := make([]byte, 64<<10)
			b.SetBytes(int64(len(data)))
			done := make(chan error, 1)
			go func() {
				_, err := io.CopyN(io.Discard, server, int64(b.N)*int64(len(data)))
				done <- err
			}()
			b.ResetTimer()
			for range b.N {
				if _, err := client.Write(data); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkWrap and BenchmarkUnwrap measure one full packet's worth of
// plaintext (16320 bytes for the AES-SHA1 enctypes).
func BenchmarkWrap(b *testing.B) { benchWrap(b, (*Wrapper).Wrap) }

func BenchmarkUnwrap(b *testing.B) { benchUnwrap(b, (*Wrapper).Unwrap) }

func benchWrap(b *testing.B, wrap func(w *Wrapper, dst, pt []byte) ([]byte, error)) {
	for _, enctype := range allEnctypes {
		b.Run(EnctypeName(enctype), func(b *testing.B) {
			ini, _ := pair(b, randomKey(b, enctype), true, 0, 0)
			pt := make([]byte, ini.MaxPlaintext(MaxPacket-4))
			b.SetBytes(int64(len(pt)))
			buf := make([]byte, 0, MaxPacket)
			for range b.N {
				if _, err := wrap(ini, buf[:0], pt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchUnwrap(b *testing.B, unwrap func(w *Wrapper, dst, tok []byte) ([]byte, error)) {
	for _, enctype := range allEnctypes {
		b.Run(EnctypeName(enctype), func(b *testing.B) {
			key := randomKey(b, enctype)
			ini, _ := pair(b, key, true, 0, 0)
			pt := make([]byte, ini.MaxPlaintext(MaxPacket-4))
			b.SetBytes(int64(len(pt)))
			toks := make([][]byte, 0, 64)
			for range 64 {
				toks = append(toks, mustWrap(b, ini, pt))
			}
			buf := make([]byte, 0, MaxPacket)
			b.ResetTimer()
			for i := range b.N {
				if i%64 == 0 {
					b.StopTimer()
					_, acc := pair(b, key, true, 0, 0)
					b.StartTimer()
					for j := 0; j < 64 && i+j < b.N; j++ {
						if _, err := unwrap(acc, buf[:0], toks[j]); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
	}
}

// Whatever a server (or anything on the path) sends after the GSS context, framed or not, the
// connection's Read does not panic, allocates no more than a packet's worth, and either returns
// what a valid wrap token carried or fails with an error that says the server failed a check
// (negotiation.ErrGSSUnverified) or that the stream ended.
func FuzzConnRead(f *testing.F) {
	_, acc := pair(f, fuzzKey, true, 0, 0)
	frame := func(tok []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(tok))), tok...)
	}
	good := frame(mustWrap(f, acc, []byte("R\x00\x00\x00\x08\x00\x00\x00\x00")))
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(good, good...))
	f.Add([]byte{0, 0, 0x40, 0x01})          // one byte over MaxPacket
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 1}) // a forged length of 2 GiB
	f.Add([]byte("E\x00\x00\x00\x08SFATAL")) // an ErrorResponse in the clear
	f.Fuzz(func(t *testing.T, stream []byte) {
		ini, _ := pair(t, fuzzKey, true, 0, 0)
		c, s := net.Pipe()
		defer c.Close()
		go func() {
			s.Write(stream)
			s.Close()
		}()
		conn := NewConn(c, ini)
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 1024)
		for range 8 {
			_, err := conn.Read(buf)
			if err == nil {
				continue
			}
			if !errors.Is(err, negotiation.ErrGSSUnverified) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) &&
				!errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("Read: %v: neither a failed check nor the end of the stream", err)
			}
			return
		}
	})
}
