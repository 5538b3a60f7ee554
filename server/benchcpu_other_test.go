//go:build !unix

package server

import "time"

// processCPU is not measured here: the handler benchmarks report 0.
func processCPU() time.Duration { return 0 }
