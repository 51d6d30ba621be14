package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// terminal is a real terminal for a full-screen command: one tmux session
// w×h on a tmux server of the test's own (its own socket, killed at the
// end), running the lockscope binary in a shell that then prints its exit
// status and stays, so the terminal the command left can be read.
type terminal struct {
	t    *testing.T
	sock string
	w, h int
}

// newTerminal starts `lockscope args...` in a w×h terminal with env
// ("NAME=value") besides the test's environment (LOCKSCOPE_* removed).
func newTerminal(t *testing.T, w, h int, env []string, args ...string) *terminal {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux is needed to drive a full-screen command (bash scripts/deps.sh installs it): %v", err)
	}
	bin := redistest.Lockscope(t)
	// A short directory: a unix socket's path is limited to ~100 bytes.
	dir, err := os.MkdirTemp("", "lstmux")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	conf := filepath.Join(dir, "tmux.conf")
	// No status line (the pane is the whole w×h), a colour terminal, and
	// the pane kept after its command exits (its status is then readable).
	if err := os.WriteFile(conf, []byte("set -g status off\nset -g default-terminal tmux-256color\nset -g remain-on-exit on\nset -g history-limit 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, sock: filepath.Join(dir, "s"), w: w, h: h}
	cmd := exec.Command("tmux", append([]string{"-S", term.sock, "-f", conf, "new-session", "-d", "-s", "top",
		"-x", strconv.Itoa(w), "-y", strconv.Itoa(h), "--", "sh", "-c", `"$0" "$@"; echo "exit status $?"; exec cat`, bin}, args...)...)
	cmd.Env = environ(env)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the %d×%d terminal at the end:\n%s", w, h, term.screenOrErr())
		}
		exec.Command("tmux", "-S", term.sock, "kill-server").Run()
	})
	return term
}

func (term *terminal) tmux(args ...string) (string, error) {
	out, err := exec.Command("tmux", append([]string{"-S", term.sock}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// screen is the terminal's text now, one line per row.
func (term *terminal) screen() string {
	term.t.Helper()
	s, err := term.tmux("capture-pane", "-p", "-t", "top")
	if err != nil {
		term.t.Fatal(err)
	}
	return s
}

func (term *terminal) screenOrErr() string {
	s, err := term.tmux("capture-pane", "-p", "-t", "top")
	if err != nil {
		return err.Error()
	}
	return s
}

// screenEscapes is the screen with its colours and attributes as escape
// sequences.
func (term *terminal) screenEscapes() string {
	term.t.Helper()
	s, err := term.tmux("capture-pane", "-p", "-e", "-t", "top")
	if err != nil {
		term.t.Fatal(err)
	}
	return s
}

// press sends keys as tmux names them (q, Enter, Escape, Down, Tab).
func (term *terminal) press(keys ...string) {
	term.t.Helper()
	if _, err := term.tmux(append([]string{"send-keys", "-t", "top"}, keys...)...); err != nil {
		term.t.Fatal(err)
	}
}

// typeText types s literally.
func (term *terminal) typeText(s string) {
	term.t.Helper()
	if _, err := term.tmux("send-keys", "-t", "top", "-l", s); err != nil {
		term.t.Fatal(err)
	}
}

// waitFor waits until cond holds for the screen (the error says what it
// lacks), or fails showing the screen.
func (term *terminal) waitFor(what string, cond func(screen string) error) string {
	term.t.Helper()
	var last string
	redistest.WaitFor(term.t, 60*time.Second, what, func() error {
		s, err := term.tmux("capture-pane", "-p", "-t", "top")
		if err != nil {
			return err
		}
		last = s
		if err := cond(s); err != nil {
			return fmt.Errorf("%v; the screen:\n%s", err, s)
		}
		return nil
	})
	return last
}

// waitText waits until the screen shows every one of texts, spaces and
// line breaks aside (a long message wraps).
func (term *terminal) waitText(texts ...string) string {
	term.t.Helper()
	return term.waitFor(fmt.Sprintf("the screen to show %q", texts), func(s string) error {
		flat := flatten(s)
		for _, x := range texts {
			if !strings.Contains(flat, flatten(x)) {
				return fmt.Errorf("no %q", x)
			}
		}
		return nil
	})
}

// flatten is s with every run of spaces and line breaks as one space.
func flatten(s string) string { return strings.Join(strings.Fields(s), " ") }

// exited waits until the command has exited and returns its status.
func (term *terminal) exited() int {
	term.t.Helper()
	status := regexp.MustCompile(`(?m)^exit status (\d+)$`)
	sc := term.waitFor("the command in the terminal to exit", func(s string) error {
		if !status.MatchString(s) {
			return errors.New("still running")
		}
		return nil
	})
	code, _ := strconv.Atoi(status.FindStringSubmatch(sc)[1])
	return code
}

// value is a tmux format's value for the pane (#{alternate_on}, ...).
func (term *terminal) value(format string) string {
	term.t.Helper()
	s, err := term.tmux("display-message", "-p", "-t", "top", format)
	if err != nil {
		term.t.Fatal(err)
	}
	return strings.TrimSpace(s)
}

// selectedLine is the screen's line marked selected ("> "), or "".
func selectedLine(screen string) string {
	for _, l := range strings.Split(screen, "\n") {
		if strings.HasPrefix(l, "> ") {
			return l
		}
	}
	return ""
}
