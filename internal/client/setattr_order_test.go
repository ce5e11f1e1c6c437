package client

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	"hushfs/internal/proto"
)

// chmodBeforeWrite is a server that runs a SETATTR before a WRITE of ours
// sent after it, and whose SETATTR reply reaches the client after the
// WRITE's: while the SETATTR is answered, the client's write-back (flush)
// runs to the end.
type chmodBeforeWrite struct {
	proto.Server
	flush func()
}

func (s *chmodBeforeWrite) SetAttr(ctx context.Context, c *proto.Cred, fh proto.FH, in proto.SetAttrs) (proto.WccRes, error) {
	res, err := s.Server.SetAttr(ctx, c, fh, in)
	if s.flush != nil {
		s.flush()
	}
	return res, err
}

// TestChmodAnsweredAfterWrite: a chmod beside a write, the chmod run by
// the server first and answered last. Its reply shows the size before
// the data; the kernel takes a SETATTR reply's size as the file's, and a
// read right after the write and close returned nothing (6 reads in
// 12,000 of write, close, read with a chmod beside). What the chmod returns
// is the newest the client knows: the WRITE's size, with the new mode.
func TestChmodAnsweredAfterWrite(t *testing.T) {
	for _, vers := range []string{"vers=3", "vers=4.1"} {
		t.Run(vers, func(t *testing.T) {
			fs, e, _ := userFile(t, vers, nil)
			ctx := ctxT(t)
			fh, _, err := fs.Open(ctx, user, e.Node, syscall.O_WRONLY)
			if err != nil {
				t.Fatal(err)
			}
			data := bytes.Repeat([]byte("data\n"), 300)
			if _, err := fs.Write(ctx, user, fh, 0, data); err != nil {
				t.Fatal(err)
			}
			srv := &chmodBeforeWrite{Server: fs.srv}
			srv.flush = func() {
				srv.flush = nil
				if err := fs.Flush(ctx, user, fh); err != nil {
					t.Errorf("flush while the chmod is answered: %v", err)
				}
			}
			fs.srv = srv
			a, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{SetMode: true, Mode: 0o664})
			if err != nil {
				t.Fatal(err)
			}
			if a.Size != uint64(len(data)) || a.Mode&0o777 != 0o664 {
				t.Errorf("chmod answered after the WRITE: size %d mode %o, want %d (the data's) and 664", a.Size, a.Mode&0o777, len(data))
			}
			fs.Release(ctx, fh)
			got, _, err := fs.GetAttr(ctx, user, e.Node)
			if err != nil {
				t.Fatal(err)
			}
			if got.Size != uint64(len(data)) {
				t.Errorf("getattr after: size %d, want %d", got.Size, len(data))
			}
		})
	}
}
