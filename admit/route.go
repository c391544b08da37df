package admit

// This file matches a request's route against the route patterns of a
// configuration (Config.Exempt, Policy.Routes).

import (
	"fmt"
	"net/url"
	"strings"
)

// route is what a configuration says of the requests matching one
// pattern: they are exempt, or take the pattern's policies.
type route struct {
	pattern string
	exempt  bool
	own     []*policy // the policies that list the pattern
	score   int       // how specific the pattern is: the greater wins
	counts  *counts   // the route's outcomes, kept across updates
}

// maxMatch is the most routes a request matches whose policies apply:
// more are very unlikely, and ignored past the most specific ones.
const maxMatch = 8

// router finds the route of a request.
type router struct {
	exact    map[string]*route // by path, or method, space and path
	patterns []pattern         // the others, in the order configured
	all      []*route          // every route, in the order configured
}

// pattern is a route pattern that is not one exact path: a path of
// segments, literal or wildcards, ending with a trailing slash (a
// subtree) or a wildcard for the rest, or neither.
type pattern struct {
	r      *route
	method string   // "" for any
	segs   []string // literal segments, or "" for a wildcard of one
	rest   bool     // the pattern matches any further segments
	score  int      // how specific the pattern is: the greater wins
}

// parsePattern parses a route pattern as net/http's ServeMux reads one: an
// optional method and a space, then a path starting with "/", whose
// segments are literal, "{name}" (any one segment) or, last, "{name...}"
// (the rest of the path); a path ending with "/" matches every path below
// it as well, and one ending with "/{$}" only itself. A GET pattern
// matches HEAD requests too.
func parsePattern(s string) (method, path string, p pattern, err error) {
	path = s
	if i := strings.IndexByte(s, ' '); i >= 0 {
		method, path = s[:i], strings.TrimLeft(s[i+1:], " ")
		if method == "" || strings.ContainsAny(method, "/{}") {
			return "", "", p, fmt.Errorf("route %q: the method before the path is not a token", s)
		}
		if strings.ToUpper(method) != method {
			return "", "", p, fmt.Errorf("route %q: methods are case-sensitive; want %s", s, strings.ToUpper(method))
		}
	}
	if !strings.HasPrefix(path, "/") || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' && r != ' ' || r == 0x7f }) >= 0 || strings.ContainsAny(path, " \t") {
		return "", "", p, fmt.Errorf("route %q: want a path starting with /, such as /login or /api/ (optionally after a method: POST /login)", s)
	}
	end := false // the path ends with "/{$}": itself, not its subtree
	if before, ok := strings.CutSuffix(path, "/{$}"); ok {
		path, end = before+"/", true
	}
	p.method = method
	parts := strings.Split(path[1:], "/")
	if parts[len(parts)-1] == "" {
		p.rest = !end
		parts = parts[:len(parts)-1]
	}
	wild := false
	for i, seg := range parts {
		switch {
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
			name := seg[1 : len(seg)-1]
			if rest, ok := strings.CutSuffix(name, "..."); ok {
				if i != len(parts)-1 || p.rest {
					return "", "", p, fmt.Errorf("route %q: a wildcard {%s} must end the path", s, name)
				}
				if rest == "" || strings.ContainsAny(rest, "{}") {
					return "", "", p, fmt.Errorf("route %q: a wildcard needs a name, such as {path...}", s)
				}
				p.rest, wild = true, true // the rest of the path, from no segment on
				continue
			}
			if name == "" || strings.ContainsAny(name, "{}") {
				return "", "", p, fmt.Errorf("route %q: a wildcard needs a name, such as {id}", s)
			}
			p.segs = append(p.segs, "")
			p.score += 2
			wild = true
		case strings.ContainsAny(seg, "{}"):
			return "", "", p, fmt.Errorf("route %q: a wildcard must be a whole segment, such as /users/{id}", s)
		case seg == "":
			return "", "", p, fmt.Errorf("route %q: a path has no empty segment", s)
		default:
			p.segs = append(p.segs, seg)
			p.score += 3
		}
	}
	p.score *= 4
	if !p.rest {
		p.score += 2 // an end beats a subtree
	}
	if method != "" {
		p.score++
	}
	if !wild && !p.rest {
		p.segs = nil // an exact path: the exact map holds it
		if strings.Contains(path, "%") {
			// The exact map holds paths as requests' are matched: each
			// segment unescaped.
			if u, ok := unescapeSegments(path); ok {
				path = u
			}
		}
	}
	for i, seg := range p.segs {
		if u, err := url.PathUnescape(seg); err == nil {
			p.segs[i] = u
		}
	}
	return method, path, p, nil
}

// add adds the route of pattern s to rt, or returns the route s has
// already, or an error if s is not a valid pattern.
func (rt *router) add(s string) (*route, error) {
	method, path, p, err := parsePattern(s)
	if err != nil {
		return nil, err
	}
	// key is the exact map's key, name the pattern as written, spaces
	// aside, which Stats name the route by.
	key, name := path, s
	if method != "" {
		key = method + " " + path
		name = method + " " + strings.TrimLeft(s[len(method):], " ")
	}
	if p.segs == nil && !p.rest {
		if r := rt.exact[key]; r != nil {
			return r, nil
		}
	} else {
		for _, q := range rt.patterns {
			if q.r.pattern == name {
				return q.r, nil
			}
		}
	}
	r := &route{pattern: name, score: p.score}
	if p.segs == nil && !p.rest {
		if rt.exact == nil {
			rt.exact = map[string]*route{}
		}
		r.score = exactScore + p.score
		rt.exact[key] = r
	} else {
		p.r = r
		rt.patterns = append(rt.patterns, p)
	}
	rt.all = append(rt.all, r)
	return r, nil
}

// match returns the routes whose patterns match a request of method and
// path, in buf, from the least specific to the most: by the most literal
// segments, then the most segments, an end before a subtree, a method
// before none, the exact path last; of two as specific, the first
// configured first.
//
// The path is the request's as sent, escaped, as ServeMux matches it: a
// segment is unescaped before it is compared, so "/a%2Fb" is one segment,
// "a/b", and "/%61pi" is "/api".
func (rt *router) match(method, path string, buf *[maxMatch]*route) []*route {
	out := buf[:0]
	escaped := strings.IndexByte(path, '%') >= 0
	for i := range rt.patterns {
		p := &rt.patterns[i]
		if p.matches(method, path, escaped) {
			out = insertByScore(out, p.r)
		}
	}
	if len(rt.exact) > 0 {
		if escaped {
			var ok bool
			if path, ok = unescapeSegments(path); !ok {
				return out // a segment holds a slash: no exact path matches it
			}
		}
		if r := rt.exact[path]; r != nil {
			out = insertByScore(out, r)
		}
		if method != "" {
			if r := rt.exact[method+" "+path]; r != nil {
				out = insertByScore(out, r)
			}
			if method == "HEAD" {
				if r := rt.exact["GET "+path]; r != nil {
					out = insertByScore(out, r)
				}
			}
		}
	}
	return out
}

// unescapeSegments returns path with each segment unescaped, and false if
// a segment holds an escaped slash (or is badly escaped), which no exact
// path matches.
func unescapeSegments(path string) (string, bool) {
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		u, err := url.PathUnescape(seg)
		if err != nil || strings.IndexByte(u, '/') >= 0 {
			return "", false
		}
		segs[i] = u
	}
	return strings.Join(segs, "/"), true
}

// exactScore ranks an exact path above every pattern.
const exactScore = 1 << 30

// insertByScore inserts r in out, kept in ascending order of specificity,
// dropping the least specific if out is full.
func insertByScore(out []*route, r *route) []*route {
	score := r.score
	if len(out) == cap(out) {
		if score <= out[0].score {
			return out
		}
		out = append(out[:0], out[1:]...)
	}
	i := len(out)
	for i > 0 && out[i-1].score > score {
		i--
	}
	out = append(out, nil)
	copy(out[i+1:], out[i:])
	out[i] = r
	return out
}

// matches reports whether p matches a request of method and path, escaped
// telling whether path holds escapes ("%").
func (p *pattern) matches(method, path string, escaped bool) bool {
	if p.method != "" && p.method != method && (p.method != "GET" || method != "HEAD") || path == "" || path[0] != '/' {
		return false
	}
	i := 1 // where the path's next segment starts; past its end once it has none
	for _, seg := range p.segs {
		if i > len(path) {
			return false // the path ended before the pattern
		}
		got := path[i:]
		if j := strings.IndexByte(got, '/'); j >= 0 {
			got, i = got[:j], i+j+1
		} else {
			i = len(path) + 1
		}
		if escaped && seg != "" && strings.IndexByte(got, '%') >= 0 {
			if u, err := url.PathUnescape(got); err == nil {
				got = u
			}
		}
		if seg == "" && got == "" || seg != "" && got != seg {
			return false // a wildcard matches a segment that is not empty
		}
	}
	if p.rest {
		return i <= len(path) // a slash followed the last segment
	}
	return i == len(path)+1 // the path ended with the last segment
}
