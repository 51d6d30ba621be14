package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// ChartDir is the chart's directory, relative to this package's.
const ChartDir = "lockscope"

// Copy is one file the chart carries a copy of: From in the repository
// (relative to its root), To in the chart.
type Copy struct{ From, To string }

// Copies lists the chart's copies of the rules and of every dashboard, with
// the repository's root at root.
func Copies(root string) ([]Copy, error) {
	copies := []Copy{{From: "alerts/lockscope.rules.yml", To: "files/lockscope.rules.yml"}}
	dashboards, err := filepath.Glob(filepath.Join(root, "grafana", "dashboards", "*.json"))
	if err != nil {
		return nil, err
	}
	if len(dashboards) == 0 {
		return nil, fmt.Errorf("no dashboard in %s", filepath.Join(root, "grafana", "dashboards"))
	}
	slices.Sort(dashboards)
	for _, d := range dashboards {
		name := filepath.Base(d)
		copies = append(copies, Copy{From: "grafana/dashboards/" + name, To: "files/dashboards/" + name})
	}
	return copies, nil
}

// Stale lists the chart's files under files/ that no source has any more.
func Stale(chart string, copies []Copy) ([]string, error) {
	var stale []string
	err := filepath.WalkDir(filepath.Join(chart, "files"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(chart, p)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(copies, func(c Copy) bool { return c.To == filepath.ToSlash(rel) }) {
			stale = append(stale, filepath.ToSlash(rel))
		}
		return nil
	})
	return stale, err
}
