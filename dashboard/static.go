package dashboard

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"strings"

	"github.com/a-h/templ"
)

//go:embed static
var staticFS embed.FS

// staticVersion maps an asset name to a short hash of its content: links
// carry it as ?v=, so an asset can be cached for a year and still change
// the moment a new build serves new content.
var staticVersion = func() map[string]string {
	m := map[string]string{}
	fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[strings.TrimPrefix(p, "static/")] = hex.EncodeToString(sum[:6])
		return nil
	})
	return m
}()

func staticPath(name string) templ.SafeURL {
	return templ.SafeURL("/static/" + name + "?v=" + staticVersion[name])
}

func staticHandler() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	files := http.FileServerFS(sub)
	return http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := staticVersion[r.URL.Path]; !ok {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("v") != "" {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
		files.ServeHTTP(w, r)
	}))
}
