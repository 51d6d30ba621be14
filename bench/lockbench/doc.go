// Package lockbench compares lock cycles (obtain + release) of lockscope's
// lock package, with and without events, against bsm/redislock,
// go-redsync/redsync, plain go-redis round trips and go-redis's
// AutoPipeliner on one redis-server. It holds only benchmarks (and a test
// that each library's cycle really locks); see BENCHMARKS.md.
package lockbench
