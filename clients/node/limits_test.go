package node

import (
	"testing"

	"github.com/lockscope/lockscope/clients/internal/clienttest"
)

// TestLimitsAreGos: the Node encoder cuts entries where the Go emitter
// does and packs no more than the decoder takes.
func TestLimitsAreGos(t *testing.T) {
	clienttest.CheckLimits(t, "lib/event.js")
}
