package client

import "sync"

// flights lets concurrent identical requests (GETATTR of one node, LOOKUP
// of one name, ACCESS of one node by one identity) share a single RPC: the
// first caller sends it, the others wait for its result.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight // GUARDED_BY(mu)
}

type flight struct {
	done chan struct{}
	val  any
	err  error
}

// do runs fn once for all callers that arrive with key while it runs and
// gives each of them fn's result. The value is shared: callers must not
// modify it. A fresh caller joins no call already running (it was sent
// before the caller came: close-to-open needs one sent after the open
// began); its own call is the one later callers join.
func (f *flights) do(key string, fresh bool, fn func() (any, error)) (any, error) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[string]*flight{}
	}
	if fl, ok := f.m[key]; ok && !fresh {
		f.mu.Unlock()
		<-fl.done
		return fl.val, fl.err
	}
	fl := &flight{done: make(chan struct{})}
	f.m[key] = fl
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		if f.m[key] == fl {
			delete(f.m, key)
		}
		f.mu.Unlock()
		close(fl.done)
	}()
	fl.val, fl.err = fn()
	return fl.val, fl.err
}
