package nfsv41

import (
	"context"
	"syscall"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

var _ proto.PathWalker = (*Server)(nil)

// LookupPath looks up names one below the other from dir in one COMPOUND
// (PUTFH dir, GETATTR, then LOOKUP, GETFH, GETATTR per name), or in as
// few as the session's ca_maxoperations allows. Each result carries its
// directory's attributes (dir's, then the previous name's) as Lookup's
// does. The results end with the first that failed.
func (s *Server) LookupPath(ctx context.Context, c *proto.Cred, dir proto.FH, names []string) ([]proto.LookupRes, error) {
	out := make([]proto.LookupRes, 0, len(names))
	// SEQUENCE, PUTFH and GETATTR besides three operations per name.
	per := max(1, (int(s.sess.Info().Fore.MaxOperations)-3)/3)
	var dirAttr proto.PostAttr
	for len(names) > 0 {
		chunk := names[:min(len(names), per)]
		names = names[len(chunk):]
		ops := []nfs4.Argop{putfh(dir), getattr(fileAttrs)}
		for _, name := range chunk {
			ops = append(ops, nfs4.Argop{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte(name)}},
				nfs4.Argop{Op: nfs4.OpGetFH}, getattr(fileAttrs))
		}
		r, err := s.compound(ctx, c, "LOOKUP", ops)
		if err != nil {
			return out, err
		}
		if a, ok := r.attrs(1); ok {
			dirAttr = a
		}
		for i := range chunk {
			at := 2 + 3*i
			res := proto.LookupRes{Status: statusErr(r.status(at)), DirAttr: dirAttr}
			if res.Status == nil {
				g, ok := r.at(at + 1).(*nfs4.GetFHRes)
				switch {
				case ok && g.Status == nfs4.OK && len(g.FH) > 0:
					res.FH = proto.FH(g.FH)
				case ok && g.Status == nfs4.OK:
					res.Status = proto.Error{Errno: syscall.EIO, Name: "NFS4_OK with an empty file handle"}
				default:
					res.Status = statusErr(r.status(at + 1))
				}
			}
			if res.Status != nil {
				return append(out, res), nil
			}
			res.Attr, _ = r.attrs(at + 2)
			out = append(out, res)
			dir, dirAttr = res.FH, res.Attr
		}
	}
	return out, nil
}
