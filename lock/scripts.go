package lock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run with EVALSHA and fall back to EVAL once per server that
// does not know them yet (redis.Script.Run); nothing is loaded at start-up.
var (
	//go:embed obtain.lua
	obtainSrc    string
	obtainScript = redis.NewScript(obtainSrc)

	//go:embed refresh.lua
	refreshSrc    string
	refreshScript = redis.NewScript(refreshSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed pttl.lua
	pttlSrc    string
	pttlScript = redis.NewScript(pttlSrc)

	//go:embed inspect.lua
	inspectSrc    string
	inspectScript = redis.NewScript(inspectSrc)

	//go:embed force.lua
	forceSrc    string
	forceScript = redis.NewScript(forceSrc)
)
