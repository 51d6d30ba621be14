// Package python is the Go side of the Python client's tests (the Python
// package lockscope lives beside it): it runs the Python tests with Debian's
// python3 and pytest against a real redis-server, decodes in Go what the
// Python package writes, and runs the examples and a deadlock between a
// Python service and Go services against the real lockscope serve,
// checking what its JSON API shows. It has no code but its tests.
package python
