module github.com/lockscope/lockscope/extra/redsyncscope

go 1.26.8

replace github.com/lockscope/lockscope/event => ../../event

replace github.com/lockscope/lockscope/lock => ../../lock

replace github.com/lockscope/lockscope/internal/testkit => ../../internal/testkit

require (
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/google/go-cmp v0.7.0
	github.com/lockscope/lockscope/event v0.0.0-00010101000000-000000000000
	github.com/lockscope/lockscope/internal/testkit v0.0.0-00010101000000-000000000000
	github.com/lockscope/lockscope/lock v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
