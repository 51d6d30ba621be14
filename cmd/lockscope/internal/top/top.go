// Package top is lockscope top's full-screen terminal view: the live
// picture a serve's dashboard shows (overview figures, held locks, who
// blocks whom, hot keys, recent expirations, incidents, one key's detail)
// and the operator actions (ask to release, force release), built on
// Bubble Tea. The model is pure: its data comes from an API the caller
// provides, so Update and View are tested without a terminal.
package top

import (
	"context"
	"errors"
	"io"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/muesli/termenv"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/top/api"
)

// API is what the view reads and sends: a lockscope serve's JSON API
// (*api.Client). Every call is bounded by its ctx.
type API interface {
	Overview(ctx context.Context) (*api.Overview, error)
	HeldLocks(ctx context.Context, limit int) (*api.LockPage, error)
	HotKeys(ctx context.Context, n int) (*api.HotKeys, error)
	Blocking(ctx context.Context) (*api.Blocking, error)
	Incidents(ctx context.Context, limit int) (*api.Incidents, error)
	Lock(ctx context.Context, key string) (*api.LockDetail, error)
	Release(ctx context.Context, key, fingerprint, reason string) (*api.ReleaseResult, error)
	Ask(ctx context.Context, key, fingerprint, reason string, grace time.Duration) (*api.AskResult, error)
}

var _ API = (*api.Client)(nil)

// How much one refresh asks for: the view keeps one answer of each, so its
// memory is bounded by these (and api.MaxBody per answer) whatever the
// serve tracks.
const (
	heldLimit     = 500 // held locks, the ones needing attention first
	hotKeysLimit  = 20
	incidentLimit = 100
)

// Options configures the view.
type Options struct {
	// URL is the serve's address, shown in the header.
	URL string
	// Interval is how often the view refreshes; 0 means 2 s.
	Interval time.Duration
	// Timeout bounds one refresh (its requests run concurrently) and one
	// action; 0 means 5 s.
	Timeout time.Duration
	// Operator: the API sends operator credentials, so the release and
	// ask actions are offered.
	Operator bool
	// Profile is how colours are written: termenv.Ascii for none
	// (NO_COLOR, a terminal without colours). The zero value is TrueColor.
	Profile termenv.Profile
	// Now is the clock for "ago" and "held for"; nil means time.Now.
	Now func() time.Time
}

// Run shows the view on out, reading keys from in, until the user quits
// (q) or ctx ends; either way the terminal is restored and the error is
// nil.
func Run(ctx context.Context, a API, opt Options, in io.Reader, out io.Writer) error {
	p := tea.NewProgram(New(a, opt), tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out), tea.WithAltScreen())
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil // a signal ended the command: a clean exit
	}
	return err
}
