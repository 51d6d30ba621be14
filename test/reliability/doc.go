// Package reliability holds lockscope's end-to-end proofs that it keeps
// telling the truth when things break: Redis restarts, a collector killed
// with SIGKILL mid-ingest, latency and stalls injected by a TCP proxy, a
// stream trimmed under a lagging collector, lock holders paused past their
// TTL, hostile keys travelling lock → stream → collector → dashboard →
// /metrics, least-privilege Redis ACL users, and a short soak.
//
// Everything lives in the package's tests; they run against real
// redis-server processes (internal/testkit/redistest) and, where a process boundary
// matters, the real lockscope binary. Each package's own tests stay beside
// it; this suite is what crosses packages and processes, and lives under
// test/ so that internal/ holds only what the binary runs and the shared
// test support. The end-to-end benchmarks of the binary (BenchmarkServeDrain,
// BenchmarkServeLive, BenchmarkServeMemory) live here too: they drive
// `lockscope serve` with this suite's harness. Benchmarks of libraries are
// under bench/.
package reliability
