module github.com/limitsgo/limits/httplimit/internal/wstest

go 1.26.0

require (
	github.com/coder/websocket v1.8.15
	github.com/gorilla/websocket v1.5.3
	github.com/limitsgo/limits v0.2.0
)

replace github.com/limitsgo/limits => ../../../
