package state

import "github.com/lockscope/lockscope/event/class"

// Lock classes are named by package event/class (user rules, then the
// default derivation); what is the aggregator's own is the cap on derived
// classes (Config.MaxClasses, the rest are OtherClass) and the per-class
// state (class_state.go).

// OtherClass collects the keys of classes beyond Config.MaxClasses.
const OtherClass = class.Other

// ClassRule names the class of the keys that match its Pattern (see
// class.Rule).
type ClassRule = class.Rule
