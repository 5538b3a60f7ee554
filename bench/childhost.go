//go:build !benchworker

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ---- the parent side ----

// host runs a scenario's workers: in the harness process, or in child processes.
type host interface {
	// readyAt waits for every worker process to have started and returns the latest start time.
	readyAt(timeout time.Duration) (int64, error)
	// kill SIGKILLs worker process i (children only) and returns when it happened.
	kill(i int) int64
	// stop stops the workers gracefully and returns max goroutines (per process), max RSS bytes (per
	// process) and CPU seconds (all worker processes).
	stop() (int64, int64, float64)
}

type localHost struct {
	stopFn  func(context.Context) error
	sampler *selfSampler
	ready   int64
}

func startLocalHost(ctx context.Context, inst instance, workers int, rec *recorder) (*localHost, error) {
	runtime.GC()
	base := runtime.NumGoroutine() - int(harnessGoroutines.Load())
	s := startSelfSampler(base)
	stop, err := inst.startWorkers(ctx, workers, localSink{r: rec})
	if err != nil {
		s.finish()
		return nil, err
	}
	return &localHost{stopFn: stop, sampler: s, ready: time.Now().UnixNano()}, nil
}

func (h *localHost) readyAt(time.Duration) (int64, error) { return h.ready, nil }
func (h *localHost) kill(int) int64                       { return 0 }
func (h *localHost) stop() (int64, int64, float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = h.stopFn(ctx)
	return h.sampler.finish()
}

type childProc struct {
	idx      int
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	ready    atomic.Int64
	readyCh  chan struct{}
	maxG     atomic.Int64
	maxRSS   atomic.Int64
	readDone chan struct{}
	// killed is read by the RSS sampler while kill sets it.
	killed atomic.Bool
}

type childHost struct {
	procs    []*childProc
	stopSamp chan struct{}
	sampDone chan struct{}
}

func startChildHost(cfg childConfig, n int, rec *recorder) (*childHost, error) {
	exe, err := workerBinaries.exe(cfg.System)
	if err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(cfg)
	h := &childHost{stopSamp: make(chan struct{}), sampDone: make(chan struct{})}
	for i := 0; i < n; i++ {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		p := &childProc{idx: i, cmd: cmd, stdin: stdin, readyCh: make(chan struct{}), readDone: make(chan struct{})}
		h.procs = append(h.procs, p)
		goHarness(func() { p.read(stdout, rec) })
	}
	goHarness(func() {
		defer close(h.sampDone)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			for _, p := range h.procs {
				if p.killed.Load() || p.cmd.Process == nil {
					continue
				}
				if r := rssOf(strconv.Itoa(p.cmd.Process.Pid)); r > p.maxRSS.Load() {
					p.maxRSS.Store(r)
				}
			}
			select {
			case <-h.stopSamp:
				return
			case <-t.C:
			}
		}
	})
	return h, nil
}

func (p *childProc) read(r io.Reader, rec *recorder) {
	defer close(p.readDone)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	readyOnce := sync.Once{}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		n := func(i int) int64 {
			if i >= len(f) {
				return 0
			}
			v, _ := strconv.ParseInt(f[i], 10, 64)
			return v
		}
		switch f[0] {
		case "R":
			p.ready.Store(n(1))
			readyOnce.Do(func() { close(p.readyCh) })
		case "G":
			if g := n(1); g > p.maxG.Load() {
				p.maxG.Store(g)
			}
		case "S":
			rec.add(ev{kind: 'S', seq: n(1), attempt: int32(n(2)), start: n(3), proc: int16(p.idx)})
		case "E":
			rec.add(ev{kind: 'E', seq: n(1), attempt: int32(n(2)), start: n(3), end: n(4), ok: n(5) == 1,
				tenant: int16(n(6)), ins: n(7), proc: int16(p.idx)})
		}
	}
}

func (h *childHost) readyAt(timeout time.Duration) (int64, error) {
	deadline := time.After(timeout)
	var latest int64
	for _, p := range h.procs {
		select {
		case <-p.readyCh:
		case <-p.readDone:
			return 0, fmt.Errorf("worker process %d exited before it was ready", p.idx)
		case <-deadline:
			return 0, fmt.Errorf("worker process %d not ready after %s", p.idx, timeout)
		}
		if r := p.ready.Load(); r > latest {
			latest = r
		}
	}
	return latest, nil
}

func (h *childHost) kill(i int) int64 {
	p := h.procs[i]
	at := time.Now().UnixNano()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.killed.Store(true)
	return at
}

func (h *childHost) stop() (int64, int64, float64) {
	for _, p := range h.procs {
		_ = p.stdin.Close()
	}
	var maxG, maxRSS int64
	var cpu float64
	for _, p := range h.procs {
		// Wait closes the stdout pipe, so it must not run before the reader has seen EOF (os/exec):
		// the child's last lines (events, its goroutine count) would be lost. The child closes its
		// stdout by exiting; one that does not exit in time is killed. Should a descendant keep the
		// pipe open after that, Wait (which closes it) ends the reader.
		timeout := time.After(25 * time.Second)
		select {
		case <-p.readDone:
		case <-timeout:
			_ = p.cmd.Process.Kill()
			select {
			case <-p.readDone:
			case <-time.After(5 * time.Second):
			}
		}
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case <-done:
		case <-timeout:
			_ = p.cmd.Process.Kill()
			<-done
		}
		<-p.readDone
		if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			cpu += rusageCPU(ru).Seconds()
		}
		if g := p.maxG.Load(); g > maxG {
			maxG = g
		}
		if r := p.maxRSS.Load(); r > maxRSS {
			maxRSS = r
		}
	}
	close(h.stopSamp)
	<-h.sampDone
	return maxG, maxRSS, cpu
}
