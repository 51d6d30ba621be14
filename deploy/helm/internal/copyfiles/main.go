// Command copyfiles refreshes the chart's copies of the alert rules and the
// Grafana dashboards from alerts/ and grafana/dashboards/ (Helm cannot read
// files outside the chart), and removes copies whose source is gone. Run it
// with `go generate` in deploy/helm.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/lockscope/lockscope/deploy/helm"
)

func main() {
	if err := run("../..", helm.ChartDir); err != nil {
		fmt.Fprintln(os.Stderr, "copyfiles:", err)
		os.Exit(1)
	}
}

func run(root, chart string) error {
	copies, err := helm.Copies(root)
	if err != nil {
		return err
	}
	for _, c := range copies {
		b, err := os.ReadFile(filepath.Join(root, c.From))
		if err != nil {
			return err
		}
		to := filepath.Join(chart, c.To)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			return err
		}
	}
	stale, err := helm.Stale(chart, copies)
	if err != nil {
		return err
	}
	for _, s := range stale {
		if err := os.Remove(filepath.Join(chart, s)); err != nil {
			return err
		}
	}
	return nil
}
