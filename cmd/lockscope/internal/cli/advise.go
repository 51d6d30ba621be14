package cli

import (
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
	"unicode"
	"unicode/utf8"
)

// advise asks a running serve for its advice (GET /api/v1/advice) rather
// than computing its own from Redis: the advice rests on the windows a
// collector keeps of the whole stream (the last hour, by the collector's
// clock, rebuilt on restart), so a second reader of the stream, started
// now, would judge fewer samples over a shorter span and disagree with
// the dashboard. Asking serve prints exactly what its dashboard shows, at
// the cost of one HTTP request, and works wherever the dashboard is
// reachable (behind a proxy, with a read token) without Redis
// credentials.

// ExitAdvice is advise's exit status when there is advice: scripts and CI
// jobs test for it. Errors exit ExitUsage (2), so that 1 means advice only.
const ExitAdvice = 1

func adviseCommand() *command {
	return &command{
		name:  "advise",
		short: "print what to change, class by class, as the dashboard advises (exit 1 if any)",
		long: `Advise prints the advice of a running 'lockscope serve' (its GET /api/v1/advice,
the same as on its dashboard's class pages): for each lock class, each rule that
fires over the window, with the figures it rests on, the thresholds it held them
to and a suggestion. The rules (ttl_short, ttl_long, single_key_bottleneck,
wait_budget_short, renew_late, no_expiry, ttl_mismatch) and their thresholds are
in docs/operating.md; a rule with too few samples stays silent.

Exit status: 0 when there is no advice, 1 when there is some, 2 on any error
(serve unreachable, bad flags), so a script can tell them apart.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			f.maxArgs = 0
			var base, window, class, token string
			var asJSON bool
			var timeout time.Duration
			f.String(&base, "url", "LOCKSCOPE_URL", "http://"+DefaultListen, "base URL of a running 'lockscope serve' (its dashboard)")
			f.String(&window, "window", "LOCKSCOPE_ADVISE_WINDOW", "5m", "window the advice is judged over: 1m, 5m or 1h")
			f.String(&class, "class", "LOCKSCOPE_ADVISE_CLASS", "", "only this lock class (its exact name, as on /classes)")
			f.Secret(&token, "operator-token", "LOCKSCOPE_OPERATOR_TOKEN", "serve's operator bearer token, when it requires credentials for reading (prefer the environment variable)")
			f.Bool(&asJSON, "json", "LOCKSCOPE_JSON", false, "print serve's JSON (the API's shape) instead of text")
			f.Duration(&timeout, "timeout", "LOCKSCOPE_TIMEOUT", 10*time.Second, "how long to wait for serve's answer")
			return func(ctx context.Context, env *Env, _ []string) error {
				err := advise(ctx, env, adviseRequest{base: base, window: window, class: class, token: token, timeout: timeout}, asJSON)
				var e *Error
				if err != nil && !errors.As(err, &e) {
					err = &Error{Code: ExitUsage, Err: err}
				}
				return err
			}
		},
	}
}

type adviseRequest struct {
	base, window, class, token string
	timeout                    time.Duration
}

// adviceReport is GET /api/v1/advice's answer (dashboard/advice.go).
type adviceReport struct {
	Window  string `json:"window"`
	Classes int    `json:"classes"`
	Advice  []struct {
		Class      string   `json:"class"`
		Kind       string   `json:"kind"`
		Severity   string   `json:"severity"`
		Summary    string   `json:"summary"`
		Evidence   []string `json:"evidence"`
		Suggestion string   `json:"suggestion"`
		Href       string   `json:"href"`
	} `json:"advice"`
	WaitsUnknown []string `json:"waits_unknown"`
}

func advise(ctx context.Context, env *Env, r adviseRequest, asJSON bool) error {
	switch r.window {
	case "1m", "5m", "1h":
	default:
		return &Error{Code: ExitUsage, Err: fmt.Errorf("--window must be 1m, 5m or 1h, not %q", r.window)}
	}
	u, err := url.Parse(strings.TrimSuffix(r.base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &Error{Code: ExitUsage, Err: fmt.Errorf("--url must be an http or https URL of 'lockscope serve', not %q", r.base)}
	}
	q := url.Values{"window": {r.window}}
	if r.class != "" {
		q.Set("class", r.class)
	}
	endpoint := u.String() + "/api/v1/advice?" + q.Encode()
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach lockscope serve at %s (--url): %v", u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("reading the advice from %s: %v", u.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(body, &e)
		if e.Error == "" {
			e.Error = strings.TrimSpace(string(body[:min(len(body), 200)]))
		}
		hint := ""
		if resp.StatusCode == http.StatusUnauthorized {
			hint = " (serve requires credentials for reading: --operator-token)"
		}
		return fmt.Errorf("GET %s: %s: %s%s", endpoint, resp.Status, terminalText(e.Error), hint)
	}
	var rep adviceReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("GET %s did not answer advice JSON (is --url a lockscope serve?): %v", endpoint, err)
	}
	if asJSON {
		env.Stdout.Write(body)
	} else {
		printAdvice(env.Stdout, u.String(), rep)
	}
	if n := len(rep.Advice); n > 0 {
		return &Error{Code: ExitAdvice, Err: fmt.Errorf("%d advice for %s (exit status 1)", n, count(countClasses(rep), "class", "classes"))}
	}
	return nil
}

func countClasses(rep adviceReport) int {
	seen := map[string]bool{}
	for _, a := range rep.Advice {
		seen[a.Class] = true
	}
	return len(seen)
}

// count is n and its noun: "1 class", "3 classes".
func count(n int, one, many string) string { return strconv.Itoa(n) + " " + plural(n, one, many) }

// printAdvice writes the advice as a terminal reads it: one block per
// advice, warnings first (as serve orders them).
func printAdvice(w io.Writer, base string, rep adviceReport) {
	for _, a := range rep.Advice {
		fmt.Fprintf(w, "%-7s  %s  %s\n", strings.ToUpper(a.Severity), terminalText(a.Class), terminalText(a.Kind))
		fmt.Fprintf(w, "  %s\n", terminalText(a.Summary))
		for _, e := range a.Evidence {
			fmt.Fprintf(w, "  - %s\n", terminalText(e))
		}
		fmt.Fprintf(w, "  suggestion: %s\n", terminalText(a.Suggestion))
		if a.Href != "" {
			fmt.Fprintf(w, "  %s%s\n", base, terminalText(a.Href))
		}
		fmt.Fprintln(w)
	}
	if len(rep.Advice) == 0 {
		fmt.Fprintf(w, "No advice: %s judged over the last %s, none with anything to change (or enough samples to tell).\n",
			count(rep.Classes, "class", "classes"), rep.Window)
	} else {
		fmt.Fprintf(w, "%s for %d of %s, over the last %s.\n", count(len(rep.Advice), "advice", "advice"),
			countClasses(rep), count(rep.Classes, "class", "classes"), rep.Window)
	}
	if len(rep.WaitsUnknown) > 0 {
		names := make([]string, len(rep.WaitsUnknown))
		for i, c := range rep.WaitsUnknown {
			names[i] = terminalText(c)
		}
		fmt.Fprintf(w, "Waits unknown (watched locks: wait_budget_short and single_key_bottleneck not judged): %s\n", strings.Join(names, ", "))
	}
}

// terminalText shows text from the API (class names, keys in evidence:
// any bytes an application chose) without letting a byte reach the
// terminal as a control: control and invalid bytes are Go-escaped.
func terminalText(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unicode.IsPrint(r) && r != ' ':
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
