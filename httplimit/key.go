package httplimit

import (
	"net/http"
	"strings"
	"unsafe"

	"github.com/limitsgo/limits/internal/front"
)

// clientKey returns the key of the client's address bucket: "a:" and its
// prefix, or "a:invalid" for requests whose address cannot be parsed.
func (c *core) clientKey(r *http.Request) string {
	return c.id.Key(r.RemoteAddr, func() []string { return r.Header.Values(c.forwarded) })
}

// clientKeyIn is clientKey, with the key's bytes kept in q.mem, which
// holds the request's state already: it costs no allocation of its own.
// The bytes are written once, here, and never again, as a string's must
// be. It is called at most once per request.
func (c *core) clientKeyIn(r *http.Request, q *request) string {
	var buf [front.KeyBytes]byte
	b := c.id.AppendKey(buf[:0], r.RemoteAddr, func() []string { return r.Header.Values(c.forwarded) })
	n := copy(q.mem[:], b)
	q.keyLen = uint8(n)
	return unsafe.String(&q.mem[0], n)
}

// CookieKey returns a CallerKey function that reads the named cookie; a
// request without it has no caller key.
func CookieKey(name string) func(*http.Request) string {
	return func(r *http.Request) string {
		c, err := r.Cookie(name)
		if err != nil {
			return ""
		}
		return c.Value
	}
}

// HeaderKey returns a CallerKey function that reads the named header, such
// as an API key; a request without it has no caller key.
func HeaderKey(name string) func(*http.Request) string {
	return func(r *http.Request) string { return r.Header.Get(name) }
}

// ExemptPaths returns an Exempt function for requests whose path is one of
// paths exactly, such as "/healthz" and "/readyz".
func ExemptPaths(paths ...string) func(*http.Request) bool {
	set := make(map[string]bool, len(paths))
	for _, p := range paths {
		set[p] = true
	}
	return func(r *http.Request) bool { return set[r.URL.Path] }
}

// ExemptPrefixes returns an Exempt function for requests whose path starts
// with one of prefixes, such as "/static/".
func ExemptPrefixes(prefixes ...string) func(*http.Request) bool {
	prefixes = append([]string(nil), prefixes...)
	return func(r *http.Request) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(r.URL.Path, p) {
				return true
			}
		}
		return false
	}
}

// ExemptAny returns an Exempt function for requests that any of fs exempts.
func ExemptAny(fs ...func(*http.Request) bool) func(*http.Request) bool {
	fs = append([]func(*http.Request) bool(nil), fs...)
	return func(r *http.Request) bool {
		for _, f := range fs {
			if f(r) {
				return true
			}
		}
		return false
	}
}
