//go:build !(linux && (amd64 || arm64 || loong64 || mips64 || mips64le || ppc64 || ppc64le || riscv64 || s390x))

package ccache

// statStampZ is statStamp; z, path NUL-terminated, is for the systems where the stat can take
// it without a copy.
func statStampZ(path string, _ []byte) (Stamp, error) { return statStamp(path) }
