package redistest

import "github.com/redis/go-redis/v9"

// ExampleClient starts a private redis-server for a package's examples
// (Example functions, which get no testing.T) and returns a client of it
// and what stops both; it panics when no server starts. In an
// application's code the client is simply
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
func ExampleClient() (*redis.Client, func()) {
	srv, err := New(Options{Notify: "none"})
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	return rdb, func() { rdb.Close(); srv.Close() }
}
