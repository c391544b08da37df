module github.com/limitsgo/limits/limitsprom/internal/series

go 1.25

// Modules of this repository: required at the repository's version
// (VERSION), built from the working tree here.
require github.com/limitsgo/limits v0.1.0

replace github.com/limitsgo/limits => ../../..
