package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/lockscope/lockscope/internal/keytext"
)

// hostCheck decides which Host headers a request may carry (Options.AllowedHosts).
type hostCheck struct {
	any      bool
	names    map[string]bool
	suffixes []string // ".example.com" for "*.example.com"
}

func newHostCheck(allowed []string) (*hostCheck, error) {
	c := &hostCheck{any: len(allowed) == 0, names: map[string]bool{}}
	for _, h := range allowed {
		h = normalHost(h)
		switch {
		case h == "*":
			c.any = true
		case strings.HasPrefix(h, "*.") && len(h) > 2 && !strings.ContainsAny(h[2:], "*/:"):
			c.suffixes = append(c.suffixes, h[1:])
		case h == "" || strings.ContainsAny(h, "*/: "):
			return nil, fmt.Errorf("dashboard: allowed host %q: want a host name, *.domain or *", h)
		default:
			c.names[h] = true
		}
	}
	return c, nil
}

// normalHost lower-cases a host name and drops a trailing dot.
func normalHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// allows reports whether a request's Host header (host[:port]) is allowed.
func (c *hostCheck) allows(hostport string) bool {
	if c.any {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true // an IP literal: no name to rebind
	}
	host = normalHost(host)
	if c.names[host] {
		return true
	}
	for _, s := range c.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// checkHost refuses requests whose Host is not allowed, before any handler
// (health and metrics included: a rebinding page could read those too).
func (s *server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts.allows(r.Host) {
			host, _ := keytext.Visible(r.Host)
			s.fail(w, r, strings.HasPrefix(r.URL.Path, "/api/"), http.StatusMisdirectedRequest,
				"host "+keytext.Cut(host, 100)+" is not one this dashboard answers to: add it to --allowed-host (LOCKSCOPE_ALLOWED_HOSTS)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// DefaultAllowedHosts is what the binary allows when no --allowed-host is
// given, for a server listening on listen (host:port): localhost always; the
// listen address's host when it is a name; and, when it listens on every
// interface, this machine's host name (full and short). IP literals pass
// anyway.
func DefaultAllowedHosts(listen string) []string {
	hosts := []string{"localhost"}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if host != "" {
		if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err != nil {
			return append(hosts, normalHost(host)) // a name
		} else if !a.IsUnspecified() {
			return hosts
		}
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts = append(hosts, name)
		if short, _, ok := strings.Cut(name, "."); ok && short != "" {
			hosts = append(hosts, short)
		}
	}
	return hosts
}
