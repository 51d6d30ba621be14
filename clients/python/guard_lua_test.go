package python

import (
	"bytes"
	"os"
	"testing"
)

// TestGuardScriptIsGos: the Python FenceGuard runs the very script of Go's
// lock.FenceGuard, so both refuse the same writes.
func TestGuardScriptIsGos(t *testing.T) {
	goSrc, err := os.ReadFile("../../lock/guard.lua")
	if err != nil {
		t.Fatal(err)
	}
	pySrc, err := os.ReadFile("lockscope/guard.lua")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(goSrc, pySrc) {
		t.Errorf("clients/python/lockscope/guard.lua differs from lock/guard.lua: copy it over")
	}
}
