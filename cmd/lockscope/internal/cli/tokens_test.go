package cli

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
)

func TestTokenWeakness(t *testing.T) {
	for _, tt := range []struct {
		tok  string
		weak bool
	}{
		{"tok-alice-0123456789", false},
		{"correct-horse-battery-staple", false},
		{"0123456789abcdef", false},
		{"0123456789abcde", true},          // 15 characters
		{"aaaaaaaaaaaaaaaaaaaaaaaa", true}, // one character
		{"abababababababababab", true},     // 2 distinct
		{"abcdefgabcdefgabcdefg", true},    // 7 distinct
		{"abcdefghabcdefghabcdefgh", false},
		{"ééééééééééééééééé", true}, // counted in characters, not bytes
	} {
		if got := tokenWeakness(tt.tok) != ""; got != tt.weak {
			t.Errorf("tokenWeakness(%q) = %q, want weak %v", tt.tok, tokenWeakness(tt.tok), tt.weak)
		}
	}
	// What the error message recommends is always accepted.
	for range 1000 {
		var b [16]byte
		rand.Read(b[:])
		if tok := hex.EncodeToString(b[:]); tokenWeakness(tok) != "" {
			t.Fatalf("tokenWeakness(%q) = %q for 32 random hex digits, want accepted", tok, tokenWeakness(tok))
		}
	}
}
