package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// listen binds the dashboard address before anything else starts, so "address
// already in use" is the first and only thing the user sees.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %v (LOCKSCOPE_LISTEN)", addr, err)
	}
	return ln, nil
}

// serveHTTP serves h on ln until ctx is done, then drains requests in flight
// for up to grace before closing what is left. A client has readTimeout to
// send a request's headers, and readTimeout again to send its body.
func serveHTTP(ctx context.Context, log *slog.Logger, ln net.Listener, h http.Handler, readTimeout, grace time.Duration) error {
	srv := &http.Server{
		Handler:           bodyDeadline(h, readTimeout),
		ReadHeaderTimeout: readTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
		log.Warn("http shutdown timed out; closed open connections", "err", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}

// bodyDeadline gives a request's body d to arrive, from the moment its
// handler starts: an operator's POST that trickles in (or never comes) ends
// with a read error after d and its connection is closed, instead of holding
// the connection and the handler open. Once the body has been read to its
// end the deadline is lifted, so a handler's own work is not cut short: the
// server's ReadTimeout would also cancel the request's context at d. GETs
// have no body and no deadline.
func bodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d > 0 && r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { rc.SetReadDeadline(time.Time{}) }}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline once the body has been read to its end.
type deadlineBody struct {
	io.ReadCloser
	lift func()
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.lift()
	}
	return n, err
}

// url is what to print for the user: a wildcard address becomes loopback.
func displayURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/"
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}
