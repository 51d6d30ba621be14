package lock

import (
	"strings"
	"sync"

	"github.com/lockscope/lockscope/event"
)

// FencePrefix starts every fence counter key.
const FencePrefix = "lockscope:fence:"

// FenceKey returns the key of the fencing counter of a lock key. The counter
// must live in the lock key's Redis Cluster hash slot, because the obtain
// script reads and writes both atomically. Redis hashes a key by its hash
// tag, the part between the first '{' and the first '}' after it, if that
// part is non-empty; otherwise by the whole key. So:
//
//   - a key with a hash tag ("job:{42}:run") keeps it:
//     "lockscope:fence:t:job:{42}:run" (the prefix holds no braces, so the
//     key's tag is still the first one);
//   - a key without '}' (the common case, "invoice:17") becomes the whole
//     hash tag: "lockscope:fence:{invoice:17}";
//   - any other key (braces but no usable tag, such as "a}b", "x{}y" or "")
//     cannot be wrapped, so a short tag with the same slot is chosen:
//     "lockscope:fence:s:{<tag>}" followed by the key.
//
// The three forms differ right after the prefix ('t', '{', 's'), so no two
// lock keys share a counter. The counter never expires.
func FenceKey(key string) string { return slotKey(FencePrefix, key) }

// slotKey returns prefix (which holds no braces) and key in the three forms
// FenceKey describes: a key in key's cluster hash slot, unique to key.
func slotKey(prefix, key string) string {
	if _, ok := hashTag(key); ok {
		return prefix + "t:" + key
	}
	if key != "" && !strings.Contains(key, "}") {
		return prefix + "{" + key + "}"
	}
	return prefix + "s:{" + slotTag(Slot(key)) + "}" + key
}

// hashTag returns the hash tag of key as Redis Cluster finds it.
func hashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return "", false
	}
	return key[open+1 : open+1+end], true
}

// Slot returns the Redis Cluster hash slot of key (CLUSTER KEYSLOT).
func Slot(key string) int { return int(event.Slot(key)) }

var (
	slotTagsOnce sync.Once
	slotTags     []string // slot -> shortest found brace-free string hashing to it
)

// slotTag returns a short string without braces whose slot is slot. The
// table is built on first use (a few milliseconds) and only for keys that
// need it.
func slotTag(slot int) string {
	slotTagsOnce.Do(func() {
		const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		slotTags = make([]string, 16384)
		left := 16384
		buf := make([]byte, 0, 4)
		var walk func(depth int)
		walk = func(depth int) {
			if left == 0 {
				return
			}
			if depth == 0 {
				s := int(event.Slot(string(buf))) // buf holds no braces
				if slotTags[s] == "" {
					slotTags[s] = string(buf)
					left--
				}
				return
			}
			for i := 0; i < len(alphabet) && left > 0; i++ {
				buf = append(buf, alphabet[i])
				walk(depth - 1)
				buf = buf[:len(buf)-1]
			}
		}
		for n := 1; left > 0; n++ {
			walk(n)
		}
	})
	return slotTags[slot]
}
