package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// flagSet is a flag.FlagSet whose flags may each be set from a LOCKSCOPE_*
// environment variable. The command line wins over the environment, the
// environment over the default.
type flagSet struct {
	cmd     *command
	fs      *flag.FlagSet
	env     map[string]string // flag name -> environment variable
	meta    map[string]string // flag name -> placeholder shown in usage
	order   []string
	minArgs int
	maxArgs int // -1 means any number
}

func newFlagSet(cmd *command) *flagSet {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors come back as one usageError line; -h prints our own usage
	return &flagSet{cmd: cmd, fs: fs, env: map[string]string{}, meta: map[string]string{}}
}

func (f *flagSet) add(name, env, meta string) {
	f.order = append(f.order, name)
	if env != "" {
		f.env[name] = env
	}
	f.meta[name] = meta
}

func (f *flagSet) String(p *string, name, env, def, usage string) {
	f.fs.StringVar(p, name, def, usage)
	f.add(name, env, "string")
}

func (f *flagSet) Secret(p *string, name, env, usage string) {
	f.fs.Var((*secretValue)(p), name, usage)
	f.add(name, env, "string")
}

func (f *flagSet) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	*p = def
	f.fs.Var((*durationValue)(p), name, usage)
	f.add(name, env, "duration")
}

func (f *flagSet) Int(p *int, name, env string, def int, usage string) {
	*p = def
	f.fs.Var((*intValue)(p), name, usage)
	f.add(name, env, "n")
}

func (f *flagSet) Float(p *float64, name, env string, def float64, usage string) {
	*p = def
	f.fs.Var((*floatValue)(p), name, usage)
	f.add(name, env, "x")
}

func (f *flagSet) Bool(p *bool, name, env string, def bool, usage string) {
	f.fs.BoolVar(p, name, def, usage)
	f.add(name, env, "")
}

// List is a comma-separated list flag; repeating the flag appends.
func (f *flagSet) List(p *[]string, name, env string, def []string, usage string) {
	*p = def
	f.fs.Var(&listValue{p: p}, name, usage)
	f.add(name, env, "a,b")
}

// parse reads the environment, then args. Flags and positional arguments may
// be interleaved ("release KEY --reason R"); "--" ends the flags.
func (f *flagSet) parse(args []string, lookup func(string) (string, bool)) ([]string, error) {
	for _, name := range f.order {
		env, ok := f.env[name]
		if !ok {
			continue
		}
		v, ok := lookup(env)
		if !ok || v == "" {
			continue
		}
		if err := f.fs.Set(name, v); err != nil {
			return nil, usageErrorf(f.cmd, "invalid value %q for %s: %v", v, env, err)
		}
	}
	// A list given on the command line replaces the environment's, not extends it.
	f.fs.VisitAll(func(fl *flag.Flag) {
		if r, ok := fl.Value.(interface{ resetSource() }); ok {
			r.resetSource()
		}
	})
	var pos []string
	rest := args
	for len(rest) > 0 {
		if err := f.fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, usageErrorf(f.cmd, "%v", err)
		}
		left := f.fs.Args()
		consumed := len(rest) - len(left)
		if consumed > 0 && rest[consumed-1] == "--" {
			pos = append(pos, left...)
			break
		}
		if len(left) == 0 {
			break
		}
		pos = append(pos, left[0])
		rest = left[1:]
	}
	if len(pos) < f.minArgs || (f.maxArgs >= 0 && len(pos) > f.maxArgs) {
		switch {
		case f.maxArgs == 0:
			return nil, usageErrorf(f.cmd, "unexpected argument %q", pos[0])
		case len(pos) < f.minArgs:
			return nil, usageErrorf(f.cmd, "missing argument: usage: lockscope %s %s", f.cmd.name, f.cmd.args)
		default:
			return nil, usageErrorf(f.cmd, "too many arguments: usage: lockscope %s %s", f.cmd.name, f.cmd.args)
		}
	}
	return pos, nil
}

// usage writes the command's help: synopsis, description and flags with
// their environment variables and defaults.
func (f *flagSet) usage(w io.Writer) {
	c := f.cmd
	fmt.Fprintf(w, "Usage: lockscope %s [flags] %s\n\n%s\n", c.name, c.args, c.long)
	if len(f.order) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFlags:\n")
	for _, name := range f.order {
		fl := f.fs.Lookup(name)
		head := "  --" + name
		if m := f.meta[name]; m != "" {
			head += " " + m
		}
		fmt.Fprintf(w, "%s\n      %s", head, fl.Usage)
		var notes []string
		if env := f.env[name]; env != "" {
			notes = append(notes, "env "+env)
		}
		if fl.DefValue != "" && fl.DefValue != "false" && fl.DefValue != "0" && fl.DefValue != "0s" {
			notes = append(notes, "default "+fl.DefValue)
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, " (%s)", strings.Join(notes, ", "))
		}
		fmt.Fprintln(w)
	}
}

type listValue struct {
	p   *[]string
	set bool
}

func (l *listValue) String() string {
	if l == nil || l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l *listValue) resetSource() { l.set = false }

func (l *listValue) Set(s string) error {
	if !l.set {
		*l.p = nil // the first explicit value replaces the default
		l.set = true
	}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l.p = append(*l.p, part)
		}
	}
	return nil
}

// secretValue never shows its value in usage output.
type secretValue string

func (s *secretValue) String() string     { return "" }
func (s *secretValue) Set(v string) error { *s = secretValue(v); return nil }

// The value types below exist for their error messages: the flag package's
// own say only "parse error".

type durationValue time.Duration

func (d *durationValue) String() string { return (*time.Duration)(d).String() }
func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 500ms, 30s or 5m")
	}
	*d = durationValue(v)
	return nil
}

type intValue int

func (i *intValue) String() string { return strconv.Itoa(int(*i)) }
func (i *intValue) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want a whole number")
	}
	*i = intValue(v)
	return nil
}

type floatValue float64

func (f *floatValue) String() string { return strconv.FormatFloat(float64(*f), 'g', -1, 64) }
func (f *floatValue) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("want a number")
	}
	*f = floatValue(v)
	return nil
}
