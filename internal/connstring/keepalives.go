package connstring

import (
	"strconv"
	"strings"
	"time"

	"github.com/pgconnector/pgconnector/internal/keepalive"
)

// parseKeepalives reads the keys; nil when none is given. Values are integers as libpq parses
// them (fe-connect.c, parse_int_param: white space around is allowed); a negative duration means
// the operating system's default, as 0 does.
func parseKeepalives(vals *values) (*keepalive.Options, error) {
	var ka keepalive.Options
	given := false
	num := func(key string) (int, bool, error) {
		v, src, ok := vals.get(key, "", false)
		if !ok {
			return 0, false, nil
		}
		given = true
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, false, invalid(key, src, "an integer")
		}
		return n, true, nil
	}
	if n, ok, err := num("keepalives"); err != nil {
		return nil, err
	} else if ok {
		ka.Off = n == 0
	}
	for _, f := range []struct {
		key  string
		unit time.Duration
		dst  *time.Duration
	}{
		{"keepalives_idle", time.Second, &ka.Idle},
		{"keepalives_interval", time.Second, &ka.Interval},
		{"tcp_user_timeout", time.Millisecond, &ka.UserTimeout},
	} {
		n, ok, err := num(f.key)
		if err != nil {
			return nil, err
		}
		if ok && n > 0 {
			*f.dst = time.Duration(n) * f.unit
		}
	}
	n, ok, err := num("keepalives_count")
	if err != nil {
		return nil, err
	}
	if ok && n > 0 {
		ka.Count = n
	}
	if !given {
		return nil, nil
	}
	return &ka, nil
}
