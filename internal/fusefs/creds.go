package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
)

// FUSE passes the caller's uid, gid and thread ID but not its supplementary
// groups, which the server needs to decide permissions. They are read from
// /proc/TID/status and kept briefly: a process making many calls costs one
// read a second, and a change of groups (or a reused pid) is seen within
// that second.
const (
	credTTL  = time.Second
	maxCreds = 1024 // callers remembered at once; beyond, expired ones go
)

type credKey struct{ pid, uid, gid uint32 }

type credEntry struct {
	cred    *client.Cred // shared and never modified once cached
	expires time.Time
}

type credCache struct {
	now  func() time.Time
	proc string

	mu sync.Mutex
	m  map[credKey]credEntry // GUARDED_BY(mu)
}

func newCredCache(now func() time.Time, proc string) *credCache {
	return &credCache{now: now, proc: proc, m: map[credKey]credEntry{}}
}

// cred returns the credential of the request's caller.
func (c *credCache) cred(h *fuse.InHeader) *client.Cred {
	k := credKey{pid: h.Pid, uid: h.Uid, gid: h.Gid}
	if k.pid == 0 {
		// Requests the kernel makes on its own behalf (write-back,
		// release after the process is gone) carry no process.
		return &client.Cred{UID: k.uid, GID: k.gid}
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.cred
	}
	groups, err := readGroups(filepath.Join(c.proc, strconv.FormatUint(uint64(k.pid), 10), "status"))
	if err != nil {
		// The caller may have exited already; its uid and gid still
		// stand, and the server decides with what it is given.
		groups = nil
	}
	cr := &client.Cred{UID: k.uid, GID: k.gid, Groups: groups}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCreds {
		for key, old := range c.m {
			if !now.Before(old.expires) {
				delete(c.m, key)
			}
		}
		if len(c.m) >= maxCreds {
			clear(c.m)
		}
	}
	c.m[k] = credEntry{cred: cr, expires: now.Add(credTTL)}
	return cr
}

// readGroups parses the "Groups:" line of a /proc/PID/status file.
func readGroups(path string) ([]uint32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("Groups:"))
		if !ok {
			continue
		}
		fields := bytes.Fields(rest)
		groups := make([]uint32, 0, len(fields))
		for _, f := range fields {
			g, err := strconv.ParseUint(string(f), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%s: bad group %q: %w", path, f, err)
			}
			groups = append(groups, uint32(g))
		}
		return groups, nil
	}
	return nil, fmt.Errorf("%s: no Groups line", path)
}
