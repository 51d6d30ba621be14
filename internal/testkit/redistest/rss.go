package redistest

import (
	"os"
	"strconv"
	"strings"
)

// PeakRSS is the peak resident set size (VmHWM) of process pid, or of this
// process when pid is 0, in bytes.
func PeakRSS(pid int) (int64, error) {
	p := "self"
	if pid != 0 {
		p = strconv.Itoa(pid)
	}
	raw, err := os.ReadFile("/proc/" + p + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, os.ErrNotExist
}
