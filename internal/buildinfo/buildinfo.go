// Package buildinfo says which rnicd this is: the release version, stated
// here once, and what the go command recorded when it built the binary
// (the VCS revision, its commit time, whether the tree had local changes).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release this tree is, or leads up to. A release is the
// commit that sets it, tagged v<Version> (README, "Versions").
const Version = "0.9.0"

// Info is what a binary knows of its build.
type Info struct {
	Version   string // Version
	Revision  string // VCS revision ("" when built outside a checkout, or by go run)
	Time      string // the revision's commit time, RFC 3339
	Modified  bool   // the tree had changes the revision does not hold
	GoVersion string // the toolchain that built it
}

// Read returns the running binary's build information.
func Read() Info {
	i := Info{Version: Version, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is the line `rnicd -version` and `rnic version` print:
// "rnicd 0.9.0 (revision 5045f1a0c2d1, 2026-11-26T12:53:00Z, modified) go1.26.0".
func (i Info) String() string {
	rev := "revision unknown"
	if i.Revision != "" {
		r := i.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		rev = "revision " + r
		if i.Time != "" {
			rev += ", " + i.Time
		}
		if i.Modified {
			rev += ", modified"
		}
	}
	return fmt.Sprintf("%s (%s) %s", i.Version, rev, i.GoVersion)
}
