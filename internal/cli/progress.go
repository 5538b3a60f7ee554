package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
)

// demoProgress shows the demo's progress: on a terminal, a block of lines redrawn in place five times
// a second (job counts per state for each queue, a progress bar, completed jobs per second); otherwise
// one plain line a second, suitable for logs and pipes.
type demoProgress struct {
	r        *runner
	out      io.Writer
	client   *pronto.Client
	stats    *demoStats
	plan     *demoPlan
	start    time.Time
	terminal bool
	color    palette
	queues   map[string]pronto.QueueConfig

	drawn   int    // lines drawn by the last redraw
	printed string // plain mode: the counts of the last line printed, less its time and rate
	counts  map[string]map[pronto.State]int64
	samples []rateSample
}

type rateSample struct {
	at        time.Time
	completed int
}

// progressStates are the states the display counts.
var progressStates = []pronto.State{
	pronto.StateScheduled, pronto.StateAvailable, pronto.StateActive, pronto.StateRetryable,
	pronto.StateCompleted, pronto.StateDiscarded,
}

// run starts the display and returns a function that draws the last frame and stops it.
func (p *demoProgress) run() (stop func()) {
	interval := time.Second
	if p.terminal {
		interval = 200 * time.Millisecond
		fmt.Fprint(p.out, "\x1b[?25l") // hide the cursor while redrawing
	}
	p.samples = []rateSample{{at: p.start}}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				p.frame(true)
				if p.terminal {
					fmt.Fprint(p.out, "\x1b[?25h")
				}
				return
			case <-t.C:
				p.frame(false)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
	}
}

// refresh reads the queues' counts; a failed read keeps the last counts.
func (p *demoProgress) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	qs, err := p.client.QueueList(ctx)
	if err != nil {
		return
	}
	counts := make(map[string]map[pronto.State]int64, len(p.queues))
	for _, q := range qs {
		if _, ok := p.queues[q.Name]; ok {
			counts[q.Name] = q.Counts
		}
	}
	p.counts = counts
}

// rate returns finished jobs per second over about the last second (the summary gives the average
// over the whole run).
func (p *demoProgress) rate(now time.Time, completed int) float64 {
	p.samples = append(p.samples, rateSample{now, completed})
	for len(p.samples) > 2 && now.Sub(p.samples[1].at) >= time.Second {
		p.samples = p.samples[1:]
	}
	first := p.samples[0]
	if dt := now.Sub(first.at).Seconds(); dt > 0 {
		return float64(completed-first.completed) / dt
	}
	return 0
}

// frame draws the progress; last is the frame drawn as the display stops.
func (p *demoProgress) frame(last bool) {
	p.refresh()
	now := time.Now()
	finished, completed, discarded, failed := p.stats.snapshot()
	rate := p.rate(now, finished)
	elapsed := now.Sub(p.start).Seconds()
	if !p.terminal {
		total := map[pronto.State]int64{}
		for _, c := range p.counts {
			for s, n := range c {
				total[s] += n
			}
		}
		counts := fmt.Sprintf("finished %d/%d (completed %d, discarded %d)  active %d  available %d  scheduled %d  retryable %d",
			finished, p.plan.total, completed, discarded, total[pronto.StateActive], total[pronto.StateAvailable],
			total[pronto.StateScheduled], total[pronto.StateRetryable])
		// The last frame often follows a tick that printed the same counts: a line of a log says
		// something new or nothing.
		if last && counts == p.printed {
			return
		}
		p.printed = counts
		fmt.Fprintf(p.out, "%5.1fs  %s  %.0f jobs/s now\n", elapsed, counts, rate)
		return
	}
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn) // back to the top of the block
	}
	lines := 0
	line := func(format string, args ...any) {
		b.WriteString("\x1b[2K") // clear the line
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
		lines++
	}
	head := fmt.Sprintf("  %-9s %7s", "QUEUE", "WORKERS")
	for _, s := range progressStates {
		head += fmt.Sprintf(" %9s", strings.ToUpper(string(s)))
	}
	line("%s", p.color.bold(head))
	total := map[pronto.State]int64{}
	workers := 0
	for _, q := range demoQueues {
		c := p.counts[q.name]
		w := p.queues[q.name].MaxWorkers
		workers += w
		row := fmt.Sprintf("  %-9s %7d", q.name, w)
		for _, s := range progressStates {
			row += p.color.state(s, fmt.Sprintf(" %9d", c[s]), c[s])
			total[s] += c[s]
		}
		line("%s", row)
	}
	row := p.color.bold(fmt.Sprintf("  %-9s %7d", "all", workers))
	for _, s := range progressStates {
		row += p.color.state(s, fmt.Sprintf(" %9d", total[s]), total[s])
	}
	line("%s", row)
	line("")
	const width = 30
	filled := width * finished / max(p.plan.total, 1)
	line("  [%s%s] %d/%d finished in %.1fs", p.color.green(strings.Repeat("█", filled)),
		p.color.dim(strings.Repeat("░", width-filled)), finished, p.plan.total, elapsed)
	line("  %.0f jobs/s now, %s discarded, %d failed attempts retried", rate,
		p.color.state(pronto.StateDiscarded, fmt.Sprint(discarded), int64(discarded)), failed)
	p.drawn = lines
	fmt.Fprint(p.out, b.String())
}

// palette colours the demo's output on a terminal; off, it returns text unchanged. It is on when
// standard output is a terminal and NO_COLOR (https://no-color.org) is not set to a non-empty value.
type palette struct{ on bool }

func (e Env) palette() palette {
	return palette{on: e.terminal() && e.getenv("NO_COLOR") == ""}
}

func (p palette) wrap(code, s string) string {
	if !p.on || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (p palette) bold(s string) string   { return p.wrap("1", s) }
func (p palette) dim(s string) string    { return p.wrap("2", s) }
func (p palette) green(s string) string  { return p.wrap("32", s) }
func (p palette) red(s string) string    { return p.wrap("31", s) }
func (p palette) yellow(s string) string { return p.wrap("33", s) }
func (p palette) cyan(s string) string   { return p.wrap("36", s) }

// state colours a count of jobs in state s: completed green, discarded red, retryable yellow, and
// zero dim.
func (p palette) state(s pronto.State, text string, n int64) string {
	switch {
	case n == 0:
		return p.dim(text)
	case s == pronto.StateCompleted:
		return p.green(text)
	case s == pronto.StateDiscarded:
		return p.red(text)
	case s == pronto.StateRetryable:
		return p.yellow(text)
	}
	return text
}
