//go:build unix && !darwin && !freebsd && !netbsd && !aix

package tlspolicy

import "syscall"

func ctimeOf(st *syscall.Stat_t) int64 { return st.Ctim.Nano() }
