// Package api is a client of a running lockscope serve's JSON API
// (/api/v1/...): what lockscope top reads and the two operator actions it
// sends, with the same credentials the dashboard takes (HTTP basic auth or
// a bearer token).
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
)

// MaxBody bounds what one answer may weigh: a serve's largest (500 held
// locks, or a blocking picture) stays far below it, and a wrong URL that
// streams forever costs no more memory than this.
const MaxBody = 8 << 20

// Errors an action's answer maps to; test with errors.Is.
var (
	// ErrOwnerChanged: the lock is held by another holder than the one
	// quoted; nothing was done.
	ErrOwnerChanged = errors.New("api: owner changed")
	// ErrNotHeld: the lock is not held (any more); nothing was done.
	ErrNotHeld = errors.New("api: not held")
	// ErrNotSupported: the serve has no such route (an older version).
	ErrNotSupported = errors.New("api: not supported by this serve")
	// ErrUnauthorized: the serve wants (other) operator credentials.
	ErrUnauthorized = errors.New("api: operator credentials refused")
)

// StatusError is an answer other than 2xx: its status and the serve's
// message ({"error": "..."}). Kind, when set, is one of the sentinel errors.
type StatusError struct {
	Code    int
	Message string
	Kind    error
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.Code)
}

func (e *StatusError) Unwrap() error { return e.Kind }

// Credentials are an operator's: a bearer token, or a user and password
// for basic auth. The zero value is an anonymous viewer.
type Credentials struct {
	Token          string
	User, Password string
}

// Operator reports whether c names an operator at all.
func (c Credentials) Operator() bool { return c.Token != "" || c.User != "" }

// Client talks to one serve. It is safe for concurrent use.
type Client struct {
	base  string // scheme://host[:port][/prefix], without a trailing slash
	creds Credentials
	hc    *http.Client
}

// New returns a client of the serve at base (http or https, optionally
// with a path prefix a reverse proxy adds). hc nil means a client of its
// own; every call is bounded by its ctx, not by hc.
func New(base string, creds Credentials, hc *http.Client) (*Client, error) {
	u, err := url.Parse(base)
	switch {
	case err != nil:
		return nil, fmt.Errorf("api: bad URL %q: %v", base, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("api: URL %q: want http:// or https://", base)
	case u.Host == "":
		return nil, fmt.Errorf("api: URL %q has no host", base)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("api: URL %q: give the serve's address without a query or fragment", base)
	case u.User != nil:
		return nil, fmt.Errorf("api: URL %q: give credentials as operator flags, not in the URL", base)
	}
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), creds: creds, hc: hc}, nil
}

// Base is the serve's address as the client uses it.
func (c *Client) Base() string { return c.base }

// Operator reports whether the client sends operator credentials.
func (c *Client) Operator() bool { return c.creds.Operator() }

// Overview is GET /api/v1/overview.
func (c *Client) Overview(ctx context.Context) (*Overview, error) {
	var v Overview
	return &v, c.get(ctx, "/api/v1/overview", &v)
}

// HeldLocks is GET /api/v1/locks: the held locks, the ones that need
// attention first (stuck, then with waiters), at most limit of them.
func (c *Client) HeldLocks(ctx context.Context, limit int) (*LockPage, error) {
	var v LockPage
	return &v, c.get(ctx, "/api/v1/locks?held=1&sort=attention&limit="+strconv.Itoa(limit), &v)
}

// HotKeys is GET /api/v1/hotkeys: the n most contended keys of the last 5
// minutes.
func (c *Client) HotKeys(ctx context.Context, n int) (*HotKeys, error) {
	var v HotKeys
	return &v, c.get(ctx, "/api/v1/hotkeys?window=5m&by=contentions&n="+strconv.Itoa(n), &v)
}

// Blocking is GET /api/v1/blocking.
func (c *Client) Blocking(ctx context.Context) (*Blocking, error) {
	var v Blocking
	return &v, c.get(ctx, "/api/v1/blocking", &v)
}

// Incidents is GET /api/v1/incidents: the limit most recently started.
func (c *Client) Incidents(ctx context.Context, limit int) (*Incidents, error) {
	var v Incidents
	return &v, c.get(ctx, "/api/v1/incidents?limit="+strconv.Itoa(limit), &v)
}

// Lock is GET /api/v1/locks/{key}: the collector's view of key and the
// holder Redis has now (its fingerprint when the client is an operator's).
func (c *Client) Lock(ctx context.Context, key string) (*LockDetail, error) {
	var v LockDetail
	return &v, c.get(ctx, lockPath(key), &v)
}

// Release is POST /api/v1/locks/{key}/release: force-release key only if
// its holder's value still has fingerprint. On ErrOwnerChanged the result
// names the current holder when the serve told it.
func (c *Client) Release(ctx context.Context, key, fingerprint, reason string) (*ReleaseResult, error) {
	var v ReleaseResult
	code, err := c.post(ctx, lockPath(key)+"/release", map[string]any{"fingerprint": fingerprint, "reason": reason}, &v)
	if err != nil {
		return &v, actionError(code, err)
	}
	return &v, nil
}

// Ask is POST /api/v1/locks/{key}/ask: ask the holder whose value has
// fingerprint to release key within grace (0: the serve's default).
// ErrNotSupported means the serve has no such route.
func (c *Client) Ask(ctx context.Context, key, fingerprint, reason string, grace time.Duration) (*AskResult, error) {
	var v AskResult
	body := map[string]any{"fingerprint": fingerprint, "reason": reason}
	if grace > 0 {
		body["grace_seconds"] = grace.Seconds()
	}
	code, err := c.post(ctx, lockPath(key)+"/ask", body, &v)
	if err != nil {
		return &v, actionError(code, err)
	}
	return &v, nil
}

func lockPath(key string) string { return "/api/v1/locks/" + keytext.PathSegment(key) }

// routeMissing is the error a serve's router answers for a path it does not
// route (dashboard's notFound): a 404 for a route, not for a lock.
const routeMissing = "no such page"

// actionError names what an action's non-2xx answer means.
func actionError(code int, err error) error {
	var se *StatusError
	if !errors.As(err, &se) {
		return err
	}
	switch {
	case code == http.StatusMethodNotAllowed, code == http.StatusNotFound && se.Message == routeMissing:
		se.Kind = ErrNotSupported
	case code == http.StatusNotFound:
		se.Kind = ErrNotHeld
	case code == http.StatusConflict && strings.Contains(se.Message, "owner changed"):
		se.Kind = ErrOwnerChanged
	case code == http.StatusUnauthorized:
		se.Kind = ErrUnauthorized
	}
	return se
}

func (c *Client) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	_, err = c.do(req, v)
	return err
}

func (c *Client) post(ctx context.Context, path string, body, v any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, v)
}

// do sends req with the credentials and decodes the JSON answer into v,
// a non-2xx answer too (it may carry the current holder). The error of a
// non-2xx answer is a *StatusError.
func (c *Client) do(req *http.Request, v any) (int, error) {
	req.Header.Set("Accept", "application/json")
	switch {
	case c.creds.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.creds.Token)
	case c.creds.User != "":
		req.SetBasicAuth(c.creds.User, c.creds.Password)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is the serve's, which the user knows
		}
		return 0, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", req.Method, req.URL.Path, err)
	}
	if len(b) > MaxBody {
		return resp.StatusCode, fmt.Errorf("%s %s: the answer is larger than %d MiB", req.Method, req.URL.Path, MaxBody>>20)
	}
	ok := resp.StatusCode/100 == 2
	if err := json.Unmarshal(b, v); err != nil && ok {
		return resp.StatusCode, fmt.Errorf("%s %s: not a lockscope answer (%s): %v", req.Method, req.URL.Path, resp.Header.Get("Content-Type"), err)
	}
	if !ok {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(b, &e) // a proxy's HTML error page has none: the status says it
		return resp.StatusCode, &StatusError{Code: resp.StatusCode, Message: e.Error}
	}
	return resp.StatusCode, nil
}
