// Package reliability holds lockscope's end-to-end proofs that it keeps
// telling the truth when things break: Redis restarts, a collector killed
// with SIGKILL mid-ingest, latency and stalls injected by a TCP proxy, a
// stream trimmed under a lagging collector, lock holders paused past their
// TTL, hostile keys travelling lock → stream → collector → dashboard →
// /metrics, least-privilege Redis ACL users, and a short soak.
//
// Everything lives in the package's tests; they run against real
// redis-server processes (internal/redistest) and, where a process boundary
// matters, the real lockscope binary.
package reliability
