package experiment

import (
	"fmt"
	"sync"
	"time"
)

// job is one independent simulation of an experiment.
type job[T any] struct {
	// exp and name label the job in errors and progress lines ("exp: name").
	exp, name string
	run       func() (T, error)
}

// runJobs runs jobs, cfg.Jobs at a time, each on its own goroutine (each
// simulation owns its loop, fabric and NICs, so they share nothing),
// starting them in the order of jobs, and returns their results in that
// order: the outcome does not depend on how many ran at once. It returns
// the first error in job order.
func runJobs[T any](cfg Config, jobs []job[T]) ([]T, error) {
	out := make([]T, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, max(cfg.Jobs, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex // orders progress lines
	for i := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			out[i], errs[i] = jobs[i].run()
			if cfg.Progress != nil {
				mu.Lock()
				status := "done"
				if errs[i] != nil {
					status = "failed: " + errs[i].Error()
				}
				fmt.Fprintf(cfg.Progress, "%s: %s %s in %.1fs\n", jobs[i].exp, jobs[i].name, status, time.Since(start).Seconds())
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			if jobs[i].exp != "" {
				return out, fmt.Errorf("experiment %s: %s: %w", jobs[i].exp, jobs[i].name, err)
			}
			return out, fmt.Errorf("%s: %w", jobs[i].name, err)
		}
	}
	return out, nil
}
