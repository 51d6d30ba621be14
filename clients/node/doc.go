// Package node is the Go side of the Node package's tests (the npm package
// lockscope lives beside it): it runs the package's own tests (npm test,
// node's test runner) against real redis-servers, decodes in Go what the
// package writes (a single node and a Cluster), and runs Node services
// against the real lockscope serve: a holder and two waiters, a holder that
// dies, using() losing its lock to an operator's forced release, and a
// deadlock between a Node service and a Go one, checking what its JSON API
// and metrics show. It has no code but its tests.
package node
