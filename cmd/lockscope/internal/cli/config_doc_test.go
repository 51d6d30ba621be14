package cli

import (
	"os"
	"regexp"
	"testing"
)

// TestConfigurationNamesEveryFlag: docs/configuration.md names every flag
// of every command, with the environment variable it reads.
func TestConfigurationNamesEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	flags := 0
	for _, c := range commands() {
		f := newFlagSet(c)
		c.define(f)
		for _, name := range f.order {
			flags++
			if !regexp.MustCompile(`(^|[^-\w])--` + regexp.QuoteMeta(name) + `([^-\w]|$)`).MatchString(doc) {
				t.Errorf("lockscope %s --%s: not in docs/configuration.md", c.name, name)
			}
			if env := f.env[name]; env != "" && !regexp.MustCompile(`\b`+regexp.QuoteMeta(env)+`\b`).MatchString(doc) {
				t.Errorf("lockscope %s --%s: its variable %s is not in docs/configuration.md", c.name, name, env)
			}
		}
	}
	if flags < 30 {
		t.Errorf("walked %d flags, want the commands' many", flags)
	}
}
