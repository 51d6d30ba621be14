package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/lock"
)

func inspectCommand() *command {
	return &command{
		name:  "inspect",
		args:  "KEY",
		short: "show who holds one lock",
		long: `Inspect reads one lock key from Redis in one step and shows its holder: owner,
lease id, fencing token, when it was taken, the TTL left and the fingerprint of
the stored value. Pass that fingerprint to 'lockscope release --fingerprint' to
release exactly the holder you saw. Exit status 1 if the key is not held.

A lock taken by another library (redis-py, node-redlock, redsync, redislock)
is named by its library and the first 8 digits of its value's fingerprint:
its value is that library's secret token (whoever knows it can extend or
release the lock), printed only with --reveal.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			f.minArgs, f.maxArgs = 1, 1
			var rc redisConfig
			rc.defineConn(f)
			var asJSON, reveal bool
			f.Bool(&asJSON, "json", "LOCKSCOPE_JSON", false, "print JSON instead of text")
			f.Bool(&reveal, "reveal", "LOCKSCOPE_REVEAL", false, "also print a foreign lock's raw value (another library's secret token)")
			return func(ctx context.Context, env *Env, args []string) error {
				rdb, err := rc.connect(ctx)
				if err != nil {
					return err
				}
				defer rdb.Close()
				key := args[0]
				h, err := redisson.NewAnyLockClient(lock.New(rdb, nil), rdb, nil).Inspect(ctx, key)
				if errors.Is(err, lock.ErrNotHeld) {
					return fmt.Errorf("%s is not held", keytext.Terminal(key, 200))
				}
				if err != nil {
					return err
				}
				now := time.Now()
				if asJSON {
					enc := json.NewEncoder(env.Stdout)
					enc.SetIndent("", "  ")
					j := toJSON(h, now)
					if reveal {
						j.Reveal(h)
					}
					return enc.Encode(j)
				}
				printHolder(env.Stdout, h, now)
				if reveal && h.Foreign {
					fmt.Fprintf(env.Stdout, "value:        %s\n", keytext.Terminal(h.Value, 0))
				}
				return nil
			}
		},
	}
}
