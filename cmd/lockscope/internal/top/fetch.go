package top

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/top/api"
)

// snapshot is one refresh's answers. A part whose request failed is nil
// and its error is in errs: the view keeps that part's previous answer and
// says it is stale.
type snapshot struct {
	at        time.Time
	overview  *api.Overview
	locks     *api.LockPage
	hot       *api.HotKeys
	blocking  *api.Blocking
	incidents *api.Incidents
	detailKey string // the key whose detail was open when the refresh began
	detail    *api.LockDetail
	detailErr error
	errs      []partError
}

type partError struct {
	part string
	err  error
}

// dataMsg carries a refresh's snapshot to Update.
type dataMsg struct{ snap snapshot }

// fetch asks for every part at once, each bounded by timeout, and for the
// open detail's key when there is one. Requests run in the command's
// goroutine and those it starts: none outlives timeout.
func fetch(a API, timeout time.Duration, now func() time.Time, detailKey string) tea.Cmd {
	return func() tea.Msg {
		// The program does not hand its context to commands: the timeout
		// is what bounds the requests, and quitting does not wait for them.
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		s := snapshot{detailKey: detailKey}
		var mu sync.Mutex
		var wg sync.WaitGroup
		part := func(name string, get func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := get(); err != nil {
					mu.Lock()
					s.errs = append(s.errs, partError{name, err})
					mu.Unlock()
				}
			}()
		}
		var (
			o  *api.Overview
			l  *api.LockPage
			h  *api.HotKeys
			b  *api.Blocking
			in *api.Incidents
		)
		part("overview", func() (err error) { o, err = a.Overview(ctx); return })
		part("held locks", func() (err error) { l, err = a.HeldLocks(ctx, heldLimit); return })
		part("hot keys", func() (err error) { h, err = a.HotKeys(ctx, hotKeysLimit); return })
		part("blocking", func() (err error) { b, err = a.Blocking(ctx); return })
		part("incidents", func() (err error) { in, err = a.Incidents(ctx, incidentLimit); return })
		if detailKey != "" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.detail, s.detailErr = a.Lock(ctx, detailKey)
			}()
		}
		wg.Wait()
		s.at = now()
		failed := map[string]bool{}
		for _, e := range s.errs {
			failed[e.part] = true
		}
		if !failed["overview"] {
			s.overview = o
		}
		if !failed["held locks"] {
			s.locks = l
		}
		if !failed["hot keys"] {
			s.hot = h
		}
		if !failed["blocking"] {
			s.blocking = b
		}
		if !failed["incidents"] {
			s.incidents = in
		}
		// In the order the parts are listed, whichever failed first.
		order := map[string]int{"overview": 0, "held locks": 1, "hot keys": 2, "blocking": 3, "incidents": 4}
		slices.SortFunc(s.errs, func(x, y partError) int { return cmp.Compare(order[x.part], order[y.part]) })
		return dataMsg{s}
	}
}

// detailMsg carries one key's detail, fetched when it is opened.
type detailMsg struct {
	key string
	d   *api.LockDetail
	err error
}

func fetchDetail(a API, timeout time.Duration, key string) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		d, err := a.Lock(ctx, key)
		return detailMsg{key, d, err}
	}
}
