package state

import "github.com/lockscope/lockscope/event/class"

// Lock classes are named by package event/class (user rules, then the
// default derivation); what is the aggregator's own is the cap on derived
// classes (Config.MaxClasses, the rest are otherClass) and the per-class
// state (class_state.go).

// otherClass collects the keys of classes beyond Config.MaxClasses.
const otherClass = class.Other

// ClassRule names the class of the keys that match its Pattern (see
// class.Rule).
type ClassRule = class.Rule
