module github.com/limitsgo/limits/grpclimit

go 1.26.0

// Modules of this repository: required at the repository's version
// (VERSION), built from the working tree here.
require github.com/limitsgo/limits v0.2.0

replace github.com/limitsgo/limits => ../

require (
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
