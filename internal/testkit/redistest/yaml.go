package redistest

import (
	"os"
	"testing"

	"go.yaml.in/yaml/v3"
)

// ReadYAML parses the YAML file at path into v, failing tb if it cannot.
func ReadYAML(tb testing.TB, path string, v any) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		tb.Fatalf("parse %s: %v", path, err)
	}
}
