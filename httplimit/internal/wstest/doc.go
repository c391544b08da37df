// Package wstest tests httplimit with real WebSocket servers and clients
// over loopback, with github.com/coder/websocket and
// github.com/gorilla/websocket: a module of its own, so that the core
// module's graph holds no WebSocket library. It has no code but its
// tests.
package wstest
