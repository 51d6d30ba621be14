package lock

import (
	"context"
	_ "embed"
	"slices"

	"github.com/redis/go-redis/v9"
)

// The scripts run with EVALSHA and fall back to EVAL once per server that
// does not know them yet; nothing is loaded at start-up.
var (
	//go:embed obtain.lua
	obtainSrc    string
	obtainScript = newScript(obtainSrc)

	//go:embed refresh.lua
	refreshSrc    string
	refreshScript = newScript(refreshSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = newScript(releaseSrc)

	//go:embed pttl.lua
	pttlSrc    string
	pttlScript = newScript(pttlSrc)

	//go:embed inspect.lua
	inspectSrc    string
	inspectScript = newScript(inspectSrc)

	//go:embed force.lua
	forceSrc    string
	forceScript = newScript(forceSrc)
)

// luaScript is a script the batcher runs: its EVALSHA command is built here
// (see evalSha) rather than by redis.Script, so that a lease can build its
// release once with arguments that cost no allocation (Lease.release).
type luaScript struct {
	*redis.Script
	src string
	sha any // the SHA1 digest, boxed once
}

func newScript(src string) *luaScript {
	s := redis.NewScript(src)
	return &luaScript{Script: s, src: src, sha: s.Hash()}
}

// evalSha returns the EVALSHA command of s with keys and args.
func (s *luaScript) evalSha(keys []string, args []any) *redis.Cmd {
	a := make([]any, 3+len(keys), 3+len(keys)+len(args))
	a[0], a[1], a[2] = "evalsha", s.sha, len(keys)
	for i, k := range keys {
		a[3+i] = k
	}
	return scriptCmd(append(a, args...))
}

// scriptCmd returns the command of args, "evalsha" or "eval", script,
// number of keys, keys..., args... The command keeps args and writes them
// when it is sent: the caller must not change them before its reply.
func scriptCmd(args []any) *redis.Cmd {
	// A command's own context is not used: go-redis takes the one passed to
	// Process or to the pipeline's Exec.
	cmd := redis.NewCmd(context.Background(), args...)
	if n, _ := args[2].(int); n > 0 {
		cmd.SetFirstKeyPos(3) // a cluster client routes by the first key
	}
	return cmd
}

// eval returns cmd, an EVALSHA of s that found the script unknown
// (NOSCRIPT: a restart, SCRIPT FLUSH), as an EVAL carrying its source.
func (s *luaScript) eval(cmd *redis.Cmd) *redis.Cmd {
	args := slices.Clone(cmd.Args())
	args[0], args[1] = "eval", s.src
	return scriptCmd(args)
}

// noScript reports whether err is the server's NOSCRIPT.
func noScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
