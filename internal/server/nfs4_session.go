package server

import (
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/version"
	"hushfs/internal/xdr"
)

// The session operations: EXCHANGE_ID, CREATE_SESSION, SEQUENCE,
// BIND_CONN_TO_SESSION, DESTROY_SESSION, RECLAIM_COMPLETE (v4state does the
// work; these put it on the wire).

func (c *compound) sequence(a *nfs4.SequenceArgs, nops, reqSize int) nfs4.Status {
	t0 := time.Now()
	defer func() { c.s.observe(uint32(nfs4.OpSequence), time.Since(t0)) }()
	r := c.s.v4.state.Sequence(a, reqSize, nops, c.conn)
	if r.Replay != nil {
		c.replay = r.Replay
		return nfs4.OK
	}
	if r.Status != nfs4.OK {
		return c.fail(nfs4.OpSequence, r.Status)
	}
	c.sess, c.client, c.slot, c.cacheThis = r.Session, r.Session.Client(), r.Slot, r.CacheThis
	mark := len(c.reply)
	c.reply = xdr.AppendUint32(c.reply, uint32(nfs4.OpSequence))
	c.reply = r.Res.Append(c.reply)
	return c.checkSize(nfs4.OpSequence, mark)
}

func (c *compound) exchangeID(a *nfs4.ExchangeIDArgs) nfs4.Status {
	r, st := c.s.v4.state.ExchangeID(a, c.principal)
	res := nfs4.ExchangeIDRes{Status: st}
	if st == nfs4.OK {
		res.ClientID, res.SequenceID, res.Flags = r.ClientID, r.SequenceID, r.Flags
		res.StateProtect.How = nfs4.SP4None
		res.ServerOwner.MajorID = c.s.v4.serverOwner
		res.ServerScope = c.s.v4.serverOwner
		res.HasImplID = true
		res.ImplID = nfs4.ImplID{Domain: []byte("hushfs"), Name: []byte("hushfs serve " + version.String()),
			Date: c.s.v4.started}
	}
	c.reply = res.Append(c.reply)
	return st
}

func (c *compound) createSession(a *nfs4.CreateSessionArgs) nfs4.Status {
	res := c.s.v4.state.CreateSession(a, c.principal, nfs4Limits, c.conn)
	c.reply = res.Append(c.reply)
	if res.Status == nfs4.OK && res.Flags&nfs4.CreateSessionFlagConnBackChan != 0 {
		c.s.probeBackChannel(c.s.v4.state.Session(res.SessionID))
	}
	return res.Status
}

func (c *compound) destroySession(a *nfs4.DestroySessionArgs) nfs4.Status {
	inThis := c.sess != nil && c.sess.ID == a.SessionID
	return c.status(c.s.v4.state.DestroySession(a.SessionID, inThis))
}

func (c *compound) bindConn(a *nfs4.BindConnToSessionArgs) nfs4.Status {
	dir, st := c.s.v4.state.BindConn(a, c.conn)
	res := nfs4.BindConnToSessionRes{Status: st, SessionID: a.SessionID, Dir: dir}
	c.reply = res.Append(c.reply)
	if st == nfs4.OK && dir&nfs4.CDFS4Back != 0 {
		c.s.probeBackChannel(c.s.v4.state.Session(a.SessionID))
	}
	return st
}

func (c *compound) reclaimComplete(a *nfs4.ReclaimCompleteArgs) nfs4.Status {
	if a.OneFS {
		// One file system at a time: ours is the only one, and the
		// client says so for all of them with rca_one_fs FALSE, which
		// is what ends its reclaims.
		if !c.cur.set {
			return c.status(nfs4.ErrNoFileHandle)
		}
		return c.status(nfs4.OK)
	}
	return c.status(c.s.v4.state.ReclaimComplete(c.client))
}
