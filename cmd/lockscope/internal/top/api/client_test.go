package api

import (
	"encoding/base64"
	"strings"
	"testing"
)

// New takes a serve's address and refuses what cannot be one, each with
// a word on why; the client's paths then start at the address.
func TestNewValidatesTheURL(t *testing.T) {
	for _, tc := range []struct{ in, base, err string }{
		{in: "http://lockscope:8080", base: "http://lockscope:8080"},
		{in: "https://locks.example.com/lockscope/", base: "https://locks.example.com/lockscope"},
		{in: "lockscope:8080", err: "want http:// or https://"},
		{in: "ftp://lockscope", err: "want http:// or https://"},
		{in: "http://", err: "has no host"},
		{in: "http://lockscope:8080/?x=1", err: "without a query"},
		{in: "http://ops:pw@lockscope:8080", err: "not in the URL"},
	} {
		c, err := New(tc.in, Credentials{}, nil)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("New(%q) = %v, want an error saying %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("New(%q) = %v, want nil", tc.in, err)
		case tc.err == "" && c.Base() != tc.base:
			t.Errorf("New(%q).Base() = %q, want %q", tc.in, c.Base(), tc.base)
		}
	}
}

// Raw gives a key's exact bytes back from its _b64 companion, and the
// string itself when there is none.
func TestRaw(t *testing.T) {
	odd := "workflow:\xff"
	if got := Raw("workflow:\uFFFD", base64.StdEncoding.EncodeToString([]byte(odd))); got != odd {
		t.Errorf("Raw with key_b64 = %q, want %q", got, odd)
	}
	if got := Raw("invoice:42", ""); got != "invoice:42" {
		t.Errorf("Raw without key_b64 = %q, want invoice:42", got)
	}
}
