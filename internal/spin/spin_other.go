//go:build !linux

package spin

// involuntarySwitches is unknown here: the Yielder yields at every empty
// poll.
func involuntarySwitches() (int64, bool) { return 0, false }
