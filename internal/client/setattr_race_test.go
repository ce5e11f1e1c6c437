package client

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"hushfs/internal/proto"
)

// preBeforeWriter is a server whose SETATTR's pre-operation attributes
// are not atomic with it (v4.1's: a GETATTR before the SETATTR in the
// COMPOUND): another writer on the server's disk rewrites the file
// between the two, and the reply carries the attributes from before it.
type preBeforeWriter struct {
	proto.Server
	path    string
	content []byte
	t       *testing.T
}

func (p *preBeforeWriter) SetAttr(ctx context.Context, c *proto.Cred, fh proto.FH, in proto.SetAttrs) (proto.WccRes, error) {
	pre, err := p.Server.GetAttr(ctx, c, fh)
	if err != nil || pre.Status != nil {
		p.t.Errorf("GETATTR before the SETATTR: %v %v", err, pre.Status)
	}
	if err := os.WriteFile(p.path, p.content, 0o644); err != nil {
		p.t.Error(err)
	}
	res, err := p.Server.SetAttr(ctx, c, fh, in)
	a := &pre.Attr
	res.Wcc.Before = proto.PreAttr{Present: true, Attr: proto.WccAttr{Size: a.Size, Mtime: a.Mtime, Ctime: a.Ctime}}
	return res, err
}

// TestChmodBesideRewrite: a chmod whose SETATTR ran right after another
// writer rewrote the file shows the new size and mtime in its reply. They
// are not the chmod's doing: the data cached from before must go (it was
// kept as the new version's, and read as the old bytes up to the new
// size).
func TestChmodBesideRewrite(t *testing.T) {
	for _, vers := range []string{"vers=3", "vers=4.1"} {
		t.Run(vers, func(t *testing.T) {
			older := bytes.Repeat([]byte("older version\n"), 60)
			newer := bytes.Repeat([]byte("newer\n"), 50)
			fs, e, path := userFile(t, vers, older)
			ctx := ctxT(t)
			read := func() []byte {
				t.Helper()
				fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
				if err != nil {
					t.Fatal(err)
				}
				defer fs.Release(ctx, fh)
				buf := make([]byte, 4096)
				n, err := fs.Read(ctx, root, fh, 0, buf)
				if err != nil {
					t.Fatal(err)
				}
				return buf[:n]
			}
			if got := read(); !bytes.Equal(got, older) {
				t.Fatalf("first read: %d bytes, want %d", len(got), len(older))
			}
			fs.srv = &preBeforeWriter{Server: fs.srv, path: path, content: newer, t: t}
			if _, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{SetMode: true, Mode: 0o664}); err != nil {
				t.Fatal(err)
			}
			if got := read(); !bytes.Equal(got, newer) {
				t.Errorf("read after the chmod: %d bytes %q…, want the rewrite's %d bytes", len(got), got[:min(len(got), 20)], len(newer))
			}
		})
	}
}

// userFile mounts (vers) a fresh server's export holding one file "f"
// with content, owned by user (the test server squashes root: the owner
// chmods), and looks it up: the mount, its entry and its path on the
// server's disk.
func userFile(t *testing.T, vers string, content []byte) (*FS, Entry, string) {
	t.Helper()
	ts := startServer(t)
	path := filepath.Join(ts.dir, "f")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(path, int(user.UID), int(user.GID))
	fs := ts.mount(t, vers)
	e, err := fs.Lookup(ctxT(t), user, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	return fs, e, path
}
