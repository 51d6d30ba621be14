package clienttest

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/lockscope/lockscope/event"
)

// CheckLimits fails t unless the encoder source at path (Python's
// event.py, Node's event.js) sets MAX_BATCH_EVENTS, MAX_BATCH_BYTES and
// ENTRY_BYTES to event.MaxBatchEvents, event.MaxBatchBytes and
// event.EntryBytes: the rules of how many events an entry carries and
// where an emitter cuts a batch are the Go event package's, written once
// more in each language.
func CheckLimits(t *testing.T, path string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"MAX_BATCH_EVENTS": event.MaxBatchEvents,
		"MAX_BATCH_BYTES":  event.MaxBatchBytes,
		"ENTRY_BYTES":      event.EntryBytes,
	}
	for name, w := range want {
		m := regexp.MustCompile(`(?m)^(?:const )?` + name + `\s*=\s*(\d+)(?:\s*<<\s*(\d+))?;?\s*(?:#.*|//.*)?$`).FindSubmatch(src)
		if m == nil {
			t.Errorf("%s: no line setting %s to a number (N or N << M)", path, name)
			continue
		}
		v, _ := strconv.Atoi(string(m[1]))
		if len(m[2]) > 0 {
			s, _ := strconv.Atoi(string(m[2]))
			v <<= s
		}
		if v != w {
			t.Errorf("%s: %s = %d, the Go event package's is %d", path, name, v, w)
		}
	}
}
