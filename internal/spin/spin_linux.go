package spin

import "golang.org/x/sys/unix"

// involuntarySwitches returns the calling thread's involuntary context
// switches: the times the kernel switched away from it while it could
// still run.
func involuntarySwitches() (int64, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return ru.Nivcsw, true
}
