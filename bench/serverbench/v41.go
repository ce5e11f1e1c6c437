package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"hushfs/internal/nfs4"
	nfs4session "hushfs/internal/nfs4/session"
	"hushfs/internal/rpc"
	"hushfs/test/harness"
)

// The NFSv4.1 scenarios: metadata COMPOUNDs as a Linux client sends them,
// from 1 and from 16 clients, each client its own client ID, session and
// TCP connection (internal/nfs4/session), one COMPOUND in flight per
// client. Opens ask for no delegation (OPEN4_SHARE_ACCESS_WANT_NO_DELEG):
// ganesha grants none, and a delegation would let the second open of a
// client go without any call, which measures the client, not the server.

// v41Attrs are the attributes a Linux client's GETATTR asks for.
var v41Attrs = nfs4.NewBitmap(nfs4.AttrType, nfs4.AttrChange, nfs4.AttrSize, nfs4.AttrFsid,
	nfs4.AttrFileid, nfs4.AttrMode, nfs4.AttrNumLinks, nfs4.AttrOwner, nfs4.AttrOwnerGroup,
	nfs4.AttrRawdev, nfs4.AttrSpaceUsed, nfs4.AttrTimeAccess, nfs4.AttrTimeMetadata,
	nfs4.AttrTimeModify)

const allAccess = nfs4.AccessRead | nfs4.AccessLookup | nfs4.AccessModify | nfs4.AccessExtend |
	nfs4.AccessDelete | nfs4.AccessExecute

// v41Client is one client of a server: a session and the handles the
// scenarios use, and the open of "small" READ goes under.
type v41Client struct {
	n     int
	s     *nfs4session.Session
	cred  rpc.OpaqueAuth
	owner []byte
	root  nfs4.FH
	small nfs4.FH
	meta  nfs4.FH
	open  nfs4.Stateid // of "small", for reading
	res   nfs4session.Result
}

func putfh(fh nfs4.FH) nfs4.Argop { return nfs4.Argop{Op: nfs4.OpPutFH, Args: &nfs4.PutFHArgs{FH: fh}} }

func getattr() nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpGetattr, Args: &nfs4.GetattrArgs{AttrRequest: v41Attrs}}
}

// compound sends ops and fails unless every one succeeded.
func (c *v41Client) compound(ctx context.Context, what string, ops []nfs4.Argop) error {
	if err := c.s.Compound(ctx, c.cred, ops, &c.res); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if c.res.Status != nfs4.OK {
		return fmt.Errorf("%s: %v", what, c.res.Status)
	}
	return nil
}

// fhAt returns a copy of the handle of GETFH's result at i.
func (c *v41Client) fhAt(i int) (nfs4.FH, error) {
	if i >= len(c.res.Ops) {
		return nil, fmt.Errorf("no result %d", i)
	}
	g, ok := c.res.Ops[i].Res.(*nfs4.GetFHRes)
	if !ok {
		return nil, fmt.Errorf("result %d is %v, not GETFH", i, c.res.Ops[i].Op)
	}
	return append(nfs4.FH(nil), g.FH...), nil
}

// stateidAt returns the stateid of OPEN's result at i.
func (c *v41Client) stateidAt(i int) (nfs4.Stateid, error) {
	if i >= len(c.res.Ops) {
		return nfs4.Stateid{}, fmt.Errorf("no result %d", i)
	}
	o, ok := c.res.Ops[i].Res.(*nfs4.OpenRes)
	if !ok {
		return nfs4.Stateid{}, fmt.Errorf("result %d is %v, not OPEN", i, c.res.Ops[i].Op)
	}
	return o.Stateid, nil
}

// connect41 sets up client n of tg: a session, the export's root walked
// from the pseudo root, the handles of "small" and "meta", and an open of
// "small" for reading.
func connect41(t *harness.Program, tg *target, n int) *v41Client {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nonce := make([]byte, 8)
	rand.Read(nonce)
	s, err := nfs4session.New(ctx, nfs4session.Options{
		RPC:   rpc.ClientOptions{Dial: tg.dial, Timeout: 30 * time.Second, Retrans: 3},
		Owner: []byte(fmt.Sprintf("serverbench %s client %d %x", tg.name, n, nonce)),
		Slots: 8,
		Logf:  func(string, ...any) {},
	})
	if err != nil {
		t.Fatalf("%s: v4.1 client %d: %v", tg.name, n, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	c := &v41Client{n: n, s: s, cred: rpc.SysCred(0, 0, nil, "serverbench"), owner: []byte(fmt.Sprintf("open owner %d", n))}
	ops := []nfs4.Argop{{Op: nfs4.OpPutRootFH}}
	for _, comp := range strings.Split(strings.Trim(tg.export, "/"), "/") {
		if comp != "" {
			ops = append(ops, nfs4.Argop{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte(comp)}})
		}
	}
	ops = append(ops, nfs4.Argop{Op: nfs4.OpGetFH})
	if err := c.compound(ctx, "walking to "+tg.export, ops); err != nil {
		t.Fatalf("%s: %v", tg.name, err)
	}
	if c.root, err = c.fhAt(len(ops) - 1); err != nil {
		t.Fatalf("%s: walking to %s: %v", tg.name, tg.export, err)
	}
	look := func(name string) nfs4.FH {
		err := c.compound(ctx, "LOOKUP "+name, []nfs4.Argop{putfh(c.root),
			{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte(name)}}, {Op: nfs4.OpGetFH}})
		var fh nfs4.FH
		if err == nil {
			fh, err = c.fhAt(2)
		}
		if err != nil {
			t.Fatalf("%s: %v", tg.name, err)
		}
		return fh
	}
	c.small, c.meta = look("small"), look("meta")
	// Under an owner of its own: OPEN+CLOSE's CLOSE (same owner, same
	// file, so the same open) would close it.
	reader := c.openFH(c.small)
	reader[1].Args.(*nfs4.OpenArgs).Owner.Owner = []byte(fmt.Sprintf("reader %d", n))
	if err := c.compound(ctx, "OPEN small", reader); err == nil {
		c.open, err = c.stateidAt(1)
	}
	if err != nil {
		t.Fatalf("%s: %v", tg.name, err)
	}
	return c
}

// openFH is a Linux client's open of a file it has the handle of: PUTFH,
// OPEN (CLAIM_FH, read), ACCESS, GETATTR.
func (c *v41Client) openFH(fh nfs4.FH) []nfs4.Argop {
	return []nfs4.Argop{putfh(fh),
		{Op: nfs4.OpOpen, Args: &nfs4.OpenArgs{ShareAccess: nfs4.ShareAccessRead | nfs4.ShareAccessWantNoDeleg,
			ShareDeny: nfs4.ShareDenyNone, Owner: nfs4.StateOwner{ClientID: c.s.Info().ClientID, Owner: c.owner},
			OpenType: nfs4.OpenNoCreate, Claim: nfs4.OpenClaim{Type: nfs4.ClaimFH}}},
		{Op: nfs4.OpAccess, Args: &nfs4.AccessArgs{Access: allAccess}}, getattr()}
}

// closeOps is PUTFH + CLOSE of stateid.
func closeOps(fh nfs4.FH, st nfs4.Stateid) []nfs4.Argop {
	return []nfs4.Argop{putfh(fh), {Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: st}}}
}

// v41Scenario is one operation of a client; i counts the client's
// operations. compounds is how many COMPOUNDs one operation sends.
type v41Scenario struct {
	name      string
	compounds int
	op        func(ctx context.Context, c *v41Client, i uint64) error
}

// v41Names are the scenarios' names, for -v41.
func v41Names() []string {
	var names []string
	for _, sc := range v41Scenarios() {
		names = append(names, sc.name)
	}
	return names
}

func v41Scenarios() []v41Scenario {
	return []v41Scenario{
		{name: "GETATTR", compounds: 1, op: func(ctx context.Context, c *v41Client, i uint64) error {
			return c.compound(ctx, "PUTFH+GETATTR", []nfs4.Argop{putfh(c.small), getattr()})
		}},
		{name: "LOOKUP", compounds: 1, op: func(ctx context.Context, c *v41Client, i uint64) error {
			return c.compound(ctx, "PUTFH+LOOKUP+GETFH+GETATTR", []nfs4.Argop{putfh(c.root),
				{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte("small")}}, {Op: nfs4.OpGetFH}, getattr()})
		}},
		{name: "OPEN+CLOSE", compounds: 2, op: func(ctx context.Context, c *v41Client, i uint64) error {
			err := c.compound(ctx, "OPEN", c.openFH(c.small))
			var st nfs4.Stateid
			if err == nil {
				st, err = c.stateidAt(1)
			}
			if err != nil {
				return err
			}
			return c.compound(ctx, "CLOSE", closeOps(c.small, st))
		}},
		{name: "create+stat+remove", compounds: 4, op: func(ctx context.Context, c *v41Client, i uint64) error {
			name := []byte(fmt.Sprintf("v%02d-%d", c.n, i))
			attrs := nfs4.Fattr{Mode: 0o644}
			attrs.Mask.Set(nfs4.AttrMode)
			err := c.compound(ctx, "OPEN create", []nfs4.Argop{putfh(c.meta),
				{Op: nfs4.OpOpen, Args: &nfs4.OpenArgs{ShareAccess: nfs4.ShareAccessBoth | nfs4.ShareAccessWantNoDeleg,
					ShareDeny: nfs4.ShareDenyNone, Owner: nfs4.StateOwner{ClientID: c.s.Info().ClientID, Owner: c.owner},
					OpenType: nfs4.OpenCreate, CreateMode: nfs4.Unchecked, CreateAttrs: attrs,
					Claim: nfs4.OpenClaim{Type: nfs4.ClaimNull, File: name}}},
				{Op: nfs4.OpGetFH}, {Op: nfs4.OpAccess, Args: &nfs4.AccessArgs{Access: allAccess}}, getattr()})
			var st nfs4.Stateid
			var fh nfs4.FH
			if err == nil {
				st, err = c.stateidAt(1)
			}
			if err == nil {
				fh, err = c.fhAt(2)
			}
			if err == nil {
				err = c.compound(ctx, "CLOSE", closeOps(fh, st))
			}
			if err == nil {
				err = c.compound(ctx, "GETATTR", []nfs4.Argop{putfh(fh), getattr()})
			}
			if err == nil {
				err = c.compound(ctx, "REMOVE", []nfs4.Argop{putfh(c.meta),
					{Op: nfs4.OpRemove, Args: &nfs4.RemoveArgs{Target: name}}})
			}
			return err
		}},
		{name: "READ 4 KiB", compounds: 1, op: func(ctx context.Context, c *v41Client, i uint64) error {
			off := (i * 4096) % (64 << 10)
			err := c.compound(ctx, "READ", []nfs4.Argop{putfh(c.small),
				{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: c.open, Offset: off, Count: 4096}}})
			if err == nil {
				if r, ok := c.res.Ops[1].Res.(*nfs4.ReadRes); !ok || len(r.Data) != 4096 {
					err = fmt.Errorf("READ at %d: short or no data", off)
				}
			}
			return err
		}},
	}
}

// measure41 runs sc on clients at once (each one operation at a time) for
// d and returns operations per second and COMPOUNDs per operation as the
// sessions counted them.
func measure41(t *harness.Program, tg *target, clients []*v41Client, sc v41Scenario, d time.Duration) (float64, float64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Uint64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	var before uint64
	for _, c := range clients {
		before += c.s.Stats().Calls
	}
	start := time.Now()
	stop := start.Add(d)
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := sc.op(ctx, c, done.Add(1)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatalf("%s: v4.1 %s from %d clients: %v", tg.name, sc.name, len(clients), err)
	}
	var after uint64
	for _, c := range clients {
		after += c.s.Stats().Calls
	}
	n := done.Load()
	return float64(n) / secs, float64(after-before) / float64(n)
}

// runV41 measures every v4.1 scenario at each concurrency against every
// target, in rounds with the servers taking turns (as run's timed cells),
// with clients set up once per target and kept for all scenarios.
func runV41(t *harness.Program, targets []*target, conc []int, d time.Duration, rounds int, selected map[string]bool) []cell {
	most := 0
	for _, n := range conc {
		most = max(most, n)
	}
	pools := make([][]*v41Client, len(targets))
	for i, tg := range targets {
		for n := range most {
			pools[i] = append(pools[i], connect41(t, tg, n))
		}
	}
	var cells []cell
	for _, sc := range v41Scenarios() {
		if !selected[sc.name] && len(selected) > 0 {
			continue
		}
		for _, n := range conc {
			rate := make([]float64, len(targets))
			comp := make([]float64, len(targets))
			for r := range rounds {
				for k := range targets {
					i := (k + r) % len(targets)
					ops, per := measure41(t, targets[i], pools[i][:n], sc, d/time.Duration(rounds))
					rate[i] += ops / float64(rounds)
					comp[i] += per / float64(rounds)
				}
			}
			cl := cell{op: sc.name, conc: n, who: "clients", unit: "ops/s", v41: true,
				value: map[string]float64{}, compounds: map[string]float64{}}
			for i, tg := range targets {
				cl.value[tg.name], cl.compounds[tg.name] = rate[i], comp[i]
				fmt.Fprintf(os.Stderr, "serverbench: v4.1 %-20s %2d clients  %-22s %10.0f ops/s  %.2f COMPOUNDs/op\n",
					sc.name, n, tg.name, rate[i], comp[i])
			}
			cells = append(cells, cl)
		}
	}
	return cells
}
