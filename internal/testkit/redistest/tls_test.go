package redistest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A TLS server answers a client with the CA and a client certificate, and
// refuses one without a certificate and plain text.
func TestTLSServerRequiresClientCertificates(t *testing.T) {
	t.Parallel()
	files := NewTLSFiles(t)
	s := Start(t, Options{TLS: files})
	if !strings.HasPrefix(s.URL(), "rediss://") {
		t.Errorf("URL() = %q, want rediss://", s.URL())
	}
	ctx := context.Background()
	if err := s.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS with a client certificate: %v", err)
	}
	noCert := files.ClientConfig()
	noCert.Certificates = nil
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: noCert, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("PING without a client certificate succeeded")
	}
	plain := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("PING in plain text to the TLS port succeeded")
	}
}

func TestTLSClusterAndSentinel(t *testing.T) {
	t.Parallel()
	files := NewTLSFiles(t)
	ctx := context.Background()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := StartClusterWith(t, Options{TLS: files})
		cl := c.Client(t)
		for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
			if err := cl.Set(ctx, k, k, 0).Err(); err != nil {
				t.Fatalf("SET %s over the TLS cluster: %v", k, err)
			}
		}
		var n atomic.Int32
		cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if m.DBSize(ctx).Val() > 0 {
				n.Add(1)
			}
			return nil
		})
		if n.Load() < 2 {
			t.Errorf("keys on %d masters, want them spread over at least 2", n.Load())
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		s := StartSentinelWith(t, Options{TLS: files})
		if !strings.HasPrefix(s.URL(), "rediss://") {
			t.Errorf("URL() = %q, want rediss://", s.URL())
		}
		fo := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.Addrs(), TLSConfig: files.ClientConfig()})
		defer fo.Close()
		if err := fo.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("SET through the TLS Sentinels: %v", err)
		}
		if got := s.Master.Client(t).Get(ctx, "k").Val(); got != "v" {
			t.Errorf("master has k = %q, want v", got)
		}
	})
}
