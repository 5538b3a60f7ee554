//go:build unix

package server

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used (user and system, all threads): the handler
// benchmarks report it per request, as the share of a shared machine's load the server takes.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
