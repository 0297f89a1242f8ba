package rnic

import "golang.org/x/sys/unix"

// osYield gives the engine's thread's core to another runnable thread,
// of this process or another (sched_yield).
func osYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
