package harness

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// KDCStandInMode is what a KDCStandIn does with a TCP connection.
type KDCStandInMode int

const (
	// KDCSilent reads what the client sends and never answers: the client waits until its own
	// timeout, or until it or the stand-in closes the connection.
	KDCSilent KDCStandInMode = iota
	// KDCReset resets the connection (TCP RST) as soon as the first bytes of the request
	// arrive: the client's read fails with "connection reset by peer".
	KDCReset
)

func (m KDCStandInMode) String() string {
	switch m {
	case KDCSilent:
		return "silent"
	case KDCReset:
		return "reset"
	}
	return "KDCStandInMode(" + strconv.Itoa(int(m)) + ")"
}

// KDCStandIn stands in for a KDC that is there and does not work: it listens on 127.0.0.1 for
// TCP and binds UDP on the same port, and never gives a Kerberos answer. TCP connections are
// accepted and then, by its Mode, left unanswered or reset; UDP datagrams are read and never
// answered (in either mode, as a KDC that drops them). Point a client at it with WriteKrb5Conf,
// or with KDC.WriteKrb5Conf to keep a real KDC's realm and credentials. It runs in the calling
// process; Close stops it.
type KDCStandIn struct {
	Port int            // TCP and UDP port on 127.0.0.1
	Mode KDCStandInMode // what it does with TCP connections

	tcp       *loopbackServer
	udp       net.PacketConn
	udpDone   chan struct{}
	accepted  atomic.Int64
	datagrams atomic.Int64
}

// StartKDCStandIn listens on a free port of 127.0.0.1, TCP and UDP alike. Call Close when done.
func StartKDCStandIn(mode KDCStandInMode) (*KDCStandIn, error) {
	if mode != KDCSilent && mode != KDCReset {
		return nil, fmt.Errorf("harness: KDC stand-in: unknown mode %d", int(mode))
	}
	var lastErr error
	for range 20 {
		ln, err := listenLow()
		if err != nil {
			return nil, fmt.Errorf("harness: KDC stand-in: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		udp, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			lastErr = err
			_ = ln.Close()
			continue // the UDP port is taken: another one
		}
		s := &KDCStandIn{
			Port:    port,
			Mode:    mode,
			tcp:     &loopbackServer{name: "KDC stand-in", ln: ln, conns: map[net.Conn]struct{}{}},
			udp:     udp,
			udpDone: make(chan struct{}),
		}
		s.tcp.start(s.serveTCP)
		go s.serveUDP()
		return s, nil
	}
	return nil, fmt.Errorf("harness: KDC stand-in: found no port free for both TCP and UDP: %w", lastErr)
}

// KDCStandInT starts a KDCStandIn for a test, fails the test if that does not work, and closes
// it when the test ends.
func KDCStandInT(t testing.TB, mode KDCStandInMode) *KDCStandIn {
	t.Helper()
	s, err := StartKDCStandIn(mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	return s
}

func (s *KDCStandIn) serveTCP(c net.Conn) {
	s.accepted.Add(1)
	if s.Mode == KDCSilent {
		// Until the client (or Close) closes the connection.
		_, _ = io.Copy(io.Discard, c)
		return
	}
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		return
	}
	// With a zero linger time, the close that follows (untrack) sends RST, not FIN.
	_ = c.(*net.TCPConn).SetLinger(0)
}

func (s *KDCStandIn) serveUDP() {
	defer close(s.udpDone)
	buf := make([]byte, 65536)
	for {
		if _, _, err := s.udp.ReadFrom(buf); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.datagrams.Add(1)
	}
}

// Addr returns 127.0.0.1:Port, as krb5.conf names a KDC.
func (s *KDCStandIn) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
}

// Accepted returns the number of TCP connections accepted so far.
func (s *KDCStandIn) Accepted() int64 { return s.accepted.Load() }

// Datagrams returns the number of UDP datagrams received so far.
func (s *KDCStandIn) Datagrams() int64 { return s.datagrams.Load() }

// Close stops listening, closes every open connection (a silent stand-in's clients then read
// EOF) and the UDP socket, and waits for the stand-in's goroutines. It is safe to call more
// than once.
func (s *KDCStandIn) Close() error {
	err := s.tcp.Close()
	if uerr := s.udp.Close(); uerr != nil && !errors.Is(uerr, net.ErrClosed) && err == nil {
		err = fmt.Errorf("harness: KDC stand-in: %w", uerr)
	}
	<-s.udpDone
	return err
}

// WriteKrb5Conf writes to path (mode 0644) a krb5.conf, like a harness KDC's, for realm with the
// stand-in as its only KDC, so that a client of realm reaches nothing else: tickets of up to 10
// hours, the encryption types of SupportedEnctypes, TCP only (udp_preference_limit = 1).
func (s *KDCStandIn) WriteKrb5Conf(path, realm string) error {
	if !realmRE.MatchString(realm) {
		return fmt.Errorf("harness: invalid realm %q (upper case letters, digits, dots and hyphens)", realm)
	}
	return writeKrb5Conf(path, krb5ConfParams{
		realm:    realm,
		kdcs:     []string{s.Addr()},
		enctypes: SupportedEnctypes(),
		lifetime: 10 * time.Hour,
		dir:      filepath.Dir(path),
	})
}

// Krb5ConfOptions is what KDC.WriteKrb5Conf changes in the KDC's krb5.conf.
type Krb5ConfOptions struct {
	// KDCs are the realm's KDCs ("host:port"), in the order krb5.conf lists them: MIT's
	// library tries them in that order, gokrb5 in random order. Empty: the KDC itself.
	KDCs []string
	// Enctypes are the encryption types clients may use and ask for (permitted_enctypes,
	// default_tkt_enctypes, default_tgs_enctypes), among SupportedEnctypes. Empty: all of
	// them.
	Enctypes []string
	// Forwardable sets forwardable = true: clients ask for forwardable tickets (the harness's
	// own krb5.conf says false).
	Forwardable bool
}

// WriteKrb5Conf writes to path (mode 0644) a krb5.conf for the KDC's realm that is its
// Krb5Conf with o's changes: for example with a KDCStandIn (its Addr) as the only KDC, so that
// credentials from this KDC (Kinit) meet a KDC that does not answer.
func (k *KDC) WriteKrb5Conf(path string, o Krb5ConfOptions) error {
	p := k.krb5ConfParams()
	if len(o.KDCs) > 0 {
		for _, a := range o.KDCs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return fmt.Errorf("harness: KDC address %q is not host:port", a)
			}
		}
		p.kdcs = o.KDCs
	}
	if len(o.Enctypes) > 0 {
		if err := checkEnctypes(o.Enctypes); err != nil {
			return err
		}
		p.enctypes = o.Enctypes
	}
	p.forwardable = o.Forwardable
	return writeKrb5Conf(path, p)
}

func writeKrb5Conf(path string, p krb5ConfParams) error {
	if err := os.WriteFile(path, []byte(krb5ConfText(p)), 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}
