// Package helm keeps the Helm chart in lockscope/ true to the repository: the
// chart's copies of the alert rules and the Grafana dashboards (files/) are
// made by `go generate` from alerts/ and grafana/dashboards/, and the tests
// fail when they drift, lint and render the chart with Helm's own Go
// packages, decode every rendered object strictly into the Kubernetes and
// Prometheus Operator types, and check the PrometheusRule with promtool.
//
// It is a module of its own so that Helm's and Kubernetes's dependencies stay
// out of lockscope's.
package helm

//go:generate go run ./internal/copyfiles
