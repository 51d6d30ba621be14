package python

import (
	"testing"

	"github.com/lockscope/lockscope/clients/internal/clienttest"
)

// TestLimitsAreGos: the Python encoder cuts entries where the Go emitter
// does and packs no more than the decoder takes.
func TestLimitsAreGos(t *testing.T) {
	clienttest.CheckLimits(t, "lockscope/event.py")
}
