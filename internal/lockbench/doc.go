// Package lockbench compares lock cycles (obtain + release) of lockscope's
// lock package, with and without events, against bsm/redislock and
// go-redsync/redsync on one redis-server. It holds only benchmarks (and a
// test that each library's cycle really locks); see BENCHMARKS.md.
package lockbench
