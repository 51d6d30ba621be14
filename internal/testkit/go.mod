module github.com/lockscope/lockscope/internal/testkit

go 1.26.8

replace github.com/lockscope/lockscope/event => ../../event

require (
	github.com/lockscope/lockscope/event v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
