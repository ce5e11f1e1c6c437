package harness

import (
	"fmt"
	"os"
	"sync"
)

// T is the part of testing.TB the harness uses, so that benchmark programs
// (which are not tests) can start the same servers. testing.TB satisfies it.
type T interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Skip(args ...any)
	TempDir() string
}

// Program implements T for a command-line program: Fatal prints and
// panics with a value that Run recovers, cleanups run in reverse order when
// Run returns, and temporary directories are removed then.
type Program struct {
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

type programFatal struct{}

// Run calls f with a fresh Program, runs its cleanups, and reports whether
// anything failed.
func Run(f func(t *Program)) (ok bool) {
	p := &Program{}
	defer func() {
		r := recover()
		p.mu.Lock()
		cleanups := p.cleanups
		p.cleanups = nil
		p.mu.Unlock()
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		if r != nil {
			if _, fatal := r.(programFatal); !fatal {
				panic(r)
			}
		}
		ok = !p.failed
	}()
	f(p)
	return
}

func (p *Program) Helper() {}

func (p *Program) Cleanup(f func()) {
	p.mu.Lock()
	p.cleanups = append(p.cleanups, f)
	p.mu.Unlock()
}

func (p *Program) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	p.mu.Lock()
	p.failed = true
	p.mu.Unlock()
}

func (p *Program) Fatal(args ...any) {
	p.Errorf("%s", fmt.Sprint(args...))
	panic(programFatal{})
}

func (p *Program) Fatalf(format string, args ...any) {
	p.Errorf(format, args...)
	panic(programFatal{})
}

func (p *Program) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (p *Program) Skip(args ...any) {
	p.Errorf("skipped: %s", fmt.Sprint(args...))
	panic(programFatal{})
}

func (p *Program) TempDir() string {
	d, err := os.MkdirTemp("", "hushfs-bench-")
	if err != nil {
		p.Fatalf("temp dir: %v", err)
	}
	p.Cleanup(func() { os.RemoveAll(d) })
	return d
}
