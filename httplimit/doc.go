// Package httplimit provides net/http middleware that limits requests with
// the limiters of package limits.
package httplimit
