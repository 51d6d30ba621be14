package cli

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// Token strength: what readTokens refuses. A token is a password that a
// script sends; these rules catch the tokens a person types ("aaaa…",
// "abababab…", "test-token") without refusing random ones: 16 random hex
// digits have fewer than 8 distinct digits about once in a hundred, 32 (what
// 'openssl rand -hex 16' prints) practically never.
const (
	minTokenLen      = 16
	minTokenDistinct = 8
)

// readTokens reads a file of named bearer tokens: "NAME TOKEN" per line,
// blank lines and '#' comments skipped. Names and tokens must be unique and
// each token strong enough (tokenWeakness). The file must be private, as ssh
// wants a private key (tokensFileMode).
func readTokens(path string) (map[string]string, error) {
	if err := tokensFileMode(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("operator tokens: %w", err)
	}
	tokens := map[string]string{}
	seen := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) != 2:
			return nil, fmt.Errorf("operator tokens %s:%d: want 'NAME TOKEN'", path, i+1)
		case tokens[f[0]] != "":
			return nil, fmt.Errorf("operator tokens %s:%d: name %q given twice", path, i+1, f[0])
		case seen[f[1]]:
			return nil, fmt.Errorf("operator tokens %s:%d: a token is given twice: names would not tell who released", path, i+1)
		}
		if why := tokenWeakness(f[1]); why != "" {
			return nil, fmt.Errorf("operator tokens %s:%d: the token of %q %s (make one with: openssl rand -hex 16)", path, i+1, f[0], why)
		}
		tokens[f[0]], seen[f[1]] = f[1], true
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("operator tokens %s: no 'NAME TOKEN' line", path)
	}
	return tokens, nil
}

// Password strength: what serve refuses of --operator-password. A person
// types it, so it is held to less than a token, but "x", "admin" or
// "aaaaaaaaaaaa" never start a dashboard that can release locks.
const (
	minPasswordLen      = 12
	minPasswordDistinct = 6
)

// passwordWeakness says why pw is too weak to be the operator password, or
// "".
func passwordWeakness(pw string) string {
	n := utf8.RuneCountInString(pw)
	distinct := map[rune]bool{}
	for _, r := range pw {
		distinct[r] = true
	}
	switch {
	case n < minPasswordLen:
		return fmt.Sprintf("is shorter than %d characters", minPasswordLen)
	case len(distinct) == 1:
		return "is one character repeated"
	case len(distinct) < minPasswordDistinct:
		return fmt.Sprintf("has %d distinct characters, fewer than %d", len(distinct), minPasswordDistinct)
	}
	return ""
}

// tokenWeakness says why tok is too weak to be an operator token, or "".
func tokenWeakness(tok string) string {
	n := utf8.RuneCountInString(tok)
	distinct := map[rune]bool{}
	for _, r := range tok {
		distinct[r] = true
	}
	switch {
	case n < minTokenLen:
		return fmt.Sprintf("is shorter than %d characters", minTokenLen)
	case len(distinct) == 1:
		return "is one character repeated"
	case len(distinct) < minTokenDistinct:
		return fmt.Sprintf("has %d distinct characters, fewer than %d", len(distinct), minTokenDistinct)
	}
	return ""
}

// tokensFileMode refuses a tokens file that users other than lockscope's
// may read or change, as ssh refuses a private key that others can read:
//
//   - no access at all for others (mode & 0o007), and no write for the group
//     (0o020), whoever owns the file;
//   - no group read either (0o040) when lockscope's own user owns the file:
//     nobody else needs it.
//
// A file owned by another user (root) may be group-readable: that owner gave
// lockscope's group access on purpose. It is how Kubernetes mounts a Secret
// for a non-root container (root-owned, mode 0440, group fsGroup).
func tokensFileMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("operator tokens: %v", pathError(err))
	}
	mode := fi.Mode().Perm()
	tooOpen := mode&0o027 != 0
	if uid, ok := fileOwner(fi); ok && uid == os.Getuid() {
		tooOpen = mode&0o077 != 0
	}
	if tooOpen {
		return fmt.Errorf("operator tokens %s: permissions %04o are too open: other users could read or change the tokens (chmod 600 %s)", path, mode, path)
	}
	return nil
}
