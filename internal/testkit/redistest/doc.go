// Package redistest is lockscope's one set of test support, shared by every
// package's tests and never imported by the binary.
//
// Real servers on loopback: private redis-server processes on free ports,
// one standalone server per test package (Shared), extra servers for fault
// tests (Start, with Stop and Restart), a 3-master Redis Cluster
// (StartCluster) and a Sentinel deployment (StartSentinel). A missing
// redis-server binary is a test failure, never a skip: install the Debian
// package redis-server (see scripts/deps.sh).
//
// Around them:
//   - WaitFor and Poll, the only polling helpers: WaitFor fails the test
//     when a condition does not come true in time, Poll reports to a caller
//     that words the failure itself; Sleep waits unless a context ends;
//     Context bounds a long run of work by the test binary's deadline, not
//     by a guess at the host's speed;
//   - Lockscope builds the lockscope binary once per test process, with
//     -race when the tests run with it;
//   - ReadStream reads and decodes an event stream;
//   - ReadYAML parses a YAML file;
//   - KeyPrefix and FreePort keep tests that share a server or a host apart.
//
// It imports nothing of lockscope but event/, so that the tests of every
// package, lock/ included, can use it without an import cycle.
package redistest
