package server

import (
	"fmt"
	"testing"

	"hushfs/internal/nfs3"
)

// BenchmarkCreateStatRemove is one client's CREATE + GETATTR + REMOVE of a
// fresh name, the metadata load bench/serverbench compares with ganesha;
// async replies before the change is on disk, sync (the default) after.
func BenchmarkCreateStatRemove(b *testing.B) {
	requireRoot(b)
	for _, async := range []bool{true, false} {
		b.Run(fmt.Sprintf("async=%v", async), func(b *testing.B) {
			e := startEnvTuned(b, false, func(c *Config) { c.Async = async })
			c := e.root0()
			dir := c.mustMkdir(c.rootFH(), "meta", 0o777)
			b.ResetTimer()
			for i := range b.N {
				name := fmt.Sprintf("m%d", i)
				fh := c.mustCreate(dir, name, 0o644)
				c.mustGetattr(fh)
				if st := c.remove(dir, name); st != nfs3.OK {
					b.Fatalf("REMOVE: %v", st)
				}
			}
		})
	}
}
