module github.com/limitsgo/limits/examples/chi

go 1.25

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/limitsgo/limits v0.2.0
)

replace github.com/limitsgo/limits => ../..
