package negotiation

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"testing/iotest"
)

func backendMsg(typ byte, body []byte) []byte {
	m := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(m[1:], uint32(4+len(body)))
	return append(m, body...)
}

func authBody(code uint32, rest ...byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, code)
	return append(b, rest...)
}

// The observer learns the authentication method from the stream pgx reads, whatever the read
// sizes, and passes every byte through unchanged.
func TestAuthObserver(t *testing.T) {
	negotiate := backendMsg('v', append(binary.BigEndian.AppendUint32(nil, 196608), 0, 0, 0, 0))
	for _, tt := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"trust", backendMsg('R', authBody(0)), "trust"},
		{"cleartext", backendMsg('R', authBody(3)), "password"},
		{"md5", backendMsg('R', authBody(5, 1, 2, 3, 4)), "md5"},
		{"scram", backendMsg('R', authBody(10, []byte("SCRAM-SHA-256\x00\x00")...)), "scram-sha-256"},
		{"gss", backendMsg('R', authBody(7)), "gss"},
		{"after NegotiateProtocolVersion", append(negotiate, backendMsg('R', authBody(10))...), "scram-sha-256"},
		{"error first", backendMsg('E', []byte("SFATAL\x00\x00")), ""},
	} {
		for _, oneByte := range []bool{false, true} {
			name := tt.name
			if oneByte {
				name += ", one byte at a time"
			}
			t.Run(name, func(t *testing.T) {
				at := &attempt{}
				stream := append(append([]byte{}, tt.stream...), backendMsg('K', make([]byte, 8))...)
				var r io.Reader = bytes.NewReader(stream)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				got, err := io.ReadAll(&authObserver{r: r, at: at})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, stream) {
					t.Error("the observer changed the stream")
				}
				if at.authMethod != tt.want {
					t.Errorf("auth method = %q, want %q", at.authMethod, tt.want)
				}
			})
		}
	}
}
