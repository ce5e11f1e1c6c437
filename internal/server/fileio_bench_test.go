package server

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// The effect of early write-back and readahead, on the disk under the test's
// temporary directory. Run with, e.g.:
//
//	go test -run - -bench 'CommitAfter|ColdRead' -benchtime 3x ./internal/server/

// BenchmarkCommitAfterSequentialWrites writes a file in 1 MiB UNSTABLE
// WRITEs from 4 goroutines over 4 connections, then COMMITs it; reported:
// the COMMIT's latency and the WRITEs' throughput, with early write-back
// (cluster-) and without (plain-), by two servers taking turns on the same
// disk, so that both see the same disk weather.
func BenchmarkCommitAfterSequentialWrites(b *testing.B) {
	for _, size := range []int{64, 256} {
		b.Run(fmt.Sprintf("%dMiB", size), func(b *testing.B) {
			type side struct {
				name            string
				clients         []*client
				root            nfs3.FH
				commit, writing time.Duration
			}
			var sides []*side
			for _, cluster := range []bool{true, false} {
				e := startEnvTuned(b, false, func(c *Config) { c.io.noCluster = !cluster })
				s := &side{name: map[bool]string{true: "cluster", false: "plain"}[cluster],
					clients: []*client{e.root0(), e.root0(), e.root0(), e.root0()}}
				s.root = s.clients[0].rootFH()
				sides = append(sides, s)
			}
			data := chunk(1, mib)
			for i := range b.N {
				for k := range sides {
					s := sides[(i+k)%len(sides)] // alternate which goes first
					c0 := s.clients[0]
					fh := c0.mustCreate(s.root, "w", 0o644)
					start := time.Now()
					parallelChunks(b, s.clients, size, func(c *client, i int) {
						if r := c.write(fh, uint64(i)*mib, data, nfs3.Unstable); r.Status != nfs3.OK {
							b.Errorf("WRITE: %v", r.Status)
						}
					})
					mid := time.Now()
					if r := c0.commit(fh); r.Status != nfs3.OK {
						b.Fatalf("COMMIT: %v", r.Status)
					}
					s.commit += time.Since(mid)
					s.writing += mid.Sub(start)
					if st := c0.remove(s.root, "w"); st != nfs3.OK {
						b.Fatalf("REMOVE: %v", st)
					}
				}
			}
			for _, s := range sides {
				b.ReportMetric(float64(s.commit.Microseconds())/1000/float64(b.N), s.name+"-commit-ms")
				b.ReportMetric(float64(size*b.N)/s.writing.Seconds(), s.name+"-write-MiB/s")
			}
		})
	}
}

// BenchmarkColdRead READs a 256 MiB file whose pages were dropped from the
// page cache, in 1 MiB READs, from 1 goroutine or 4 (over 4 connections,
// so they arrive reordered), by three servers taking turns on the same
// disk: with the server's readahead as configured for the disk (auto-: on
// a disk whose kernel readahead covers maxReadahead, only the access
// hints), with readahead forced as if the kernel's were the usual 128 KiB
// (willneed-), and without either (plain-). Reported: throughput and the
// time READs spent in pread, per pass.
func BenchmarkColdRead(b *testing.B) {
	const size = 256
	for _, par := range []int{1, 4} {
		b.Run(fmt.Sprintf("readers=%d", par), func(b *testing.B) {
			type side struct {
				name    string
				clients []*client
				path    string
				fh      nfs3.FH
				reading time.Duration
				io      *timedIO
			}
			var sides []*side
			for _, mode := range []string{"auto", "willneed", "plain"} {
				tio := &timedIO{}
				e := startEnvTuned(b, false, func(c *Config) {
					c.io.files = tio
					switch mode {
					case "plain":
						c.io.noReadahead = true
					case "willneed":
						c.io.kernelRA = defaultKernelRA
					}
				})
				s := &side{name: mode,
					path: filepath.Join(e.root, "cold"), io: tio}
				for range par {
					s.clients = append(s.clients, e.root0())
				}
				writeSynced(b, s.path, size)
				s.fh = s.clients[0].mustLookup(s.clients[0].rootFH(), "cold")
				sides = append(sides, s)
			}
			for i := range b.N {
				for k := range sides {
					s := sides[(i+k)%len(sides)]
					dropCache(b, s.path)
					start := time.Now()
					parallelChunks(b, s.clients, size, func(c *client, i int) {
						if r := c.read(s.fh, uint64(i)*mib, mib); r.Status != nfs3.OK || len(r.Data) != mib {
							b.Errorf("READ: %v, %d bytes", r.Status, len(r.Data))
						}
					})
					s.reading += time.Since(start)
				}
			}
			for _, s := range sides {
				b.ReportMetric(float64(size*b.N)/s.reading.Seconds(), s.name+"-MiB/s")
				b.ReportMetric(float64(s.io.pread.Load())/1e6/float64(b.N), s.name+"-pread-ms")
			}
		})
	}
}

// timedIO is the system calls, with the time spent in pread summed: what
// READs wait for the disk.
type timedIO struct {
	sysFileIO
	pread atomic.Int64 // nanoseconds
}

func (t *timedIO) Pread(fd int, p []byte, off int64) (int, error) {
	start := time.Now()
	n, err := t.sysFileIO.Pread(fd, p, off)
	t.pread.Add(int64(time.Since(start)))
	return n, err
}

// parallelChunks runs fn for chunks 0..n-1, one goroutine per client, each
// taking the next chunk when done with one.
func parallelChunks(b *testing.B, clients []*client, n int, fn func(c *client, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || b.Failed() {
					return
				}
				fn(c, i)
			}
		}()
	}
	wg.Wait()
}

// writeSynced writes a file of size MiB and syncs it.
func writeSynced(b *testing.B, path string, size int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for i := range size {
		if _, err := f.Write(chunk(i, mib)); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}

// dropCache evicts a (clean) file's pages from the page cache and checks
// that none is left resident.
func dropCache(b *testing.B, path string) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Fdatasync(fd); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		b.Fatal(err)
	}
	m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		b.Fatalf("mincore: %v", e)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	if resident > len(vec)/100 {
		b.Fatalf("%d of %d pages still cached after FADV_DONTNEED", resident, len(vec))
	}
}
