package client

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// LookupCacheMode is the lookupcache= mount option.
type LookupCacheMode int

const (
	LookupCacheAll      LookupCacheMode = iota // positive and negative entries
	LookupCachePositive                        // positive entries only
	LookupCacheNone                            // every lookup goes to the server
)

func (m LookupCacheMode) String() string {
	switch m {
	case LookupCachePositive:
		return "positive"
	case LookupCacheNone:
		return "none"
	}
	return "all"
}

// Options are the mount options, named and defaulted as in nfs(5).
type Options struct {
	Vers      int    // 3, or 4 for NFSv4.1
	Port      int    // NFS port; 0 = ask the portmapper
	MountPort int    // MOUNT port; 0 = ask the portmapper
	Proto     string // only "tcp"
	Rsize     uint32 // 0 = the server's rtmax (capped at 1 MiB)
	Wsize     uint32 // 0 = the server's wtmax (capped at 1 MiB)
	Timeo     time.Duration
	Retrans   int
	Hard      bool
	ReadOnly  bool

	NoAC        bool
	AcRegMin    time.Duration
	AcRegMax    time.Duration
	AcDirMin    time.Duration
	AcDirMax    time.Duration
	LookupCache LookupCacheMode
	NegTimeo    time.Duration // lifetime of a negative lookup entry
	CTO         bool
	RdirPlus    bool
	Sync        bool // every write is FILE_SYNC, as the sync mount option asks
	// KernelWriteback lets the kernel buffer writes in its page cache
	// (FUSE writeback_cache) instead of passing each write(2) through to
	// the core at once. Measured against the default and not chosen: see
	// DEVELOPERS.md. For comparison only.
	KernelWriteback bool

	// DelegIdle: a delegation no open used for this long, with nothing
	// open here, goes back (NFSv4.1; delegidle=SECONDS; 0: DefaultDelegIdle).
	DelegIdle time.Duration
	// DelegMax: the most file delegations kept; past it the least
	// recently used with nothing open go back (NFSv4.1; delegmax=N; 0:
	// DefaultDelegMax).
	DelegMax int

	// FUSE and generic mount(8) options that are passed to the kernel mount.
	AllowOther bool
	NoSuid     bool
	NoDev      bool
	NoExec     bool
	NoAtime    bool
}

// DefaultOptions returns nfs(5)'s defaults for NFSv3 over TCP.
func DefaultOptions() Options {
	return Options{
		Vers:     3,
		Proto:    "tcp",
		Timeo:    60 * time.Second, // timeo=600 deciseconds for TCP
		Retrans:  2,
		Hard:     true,
		AcRegMin: 3 * time.Second,
		AcRegMax: 60 * time.Second,
		AcDirMin: 30 * time.Second,
		AcDirMax: 60 * time.Second,
		NegTimeo: 3 * time.Second,
		CTO:      true,
		RdirPlus: true,
		NoSuid:   true, // FUSE mounts are nosuid,nodev by default, as fuse(8) does
		NoDev:    true,
	}
}

// OptionError names the option that could not be used.
type OptionError struct {
	Option string
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("mount option %q: %s", e.Option, e.Reason)
}

// ParseOptions applies a comma-separated option string (as given to -o) on
// top of DefaultOptions. Unknown or malformed options are errors naming the
// option; options that only mount(8) cares about are accepted and ignored.
func ParseOptions(s string) (Options, error) {
	o := DefaultOptions()
	if err := o.Apply(s); err != nil {
		return Options{}, err
	}
	return o, nil
}

// Apply parses s on top of the receiver's current values.
func (o *Options) Apply(s string) error {
	for _, opt := range strings.Split(s, ",") {
		opt = strings.TrimSpace(opt)
		if opt == "" {
			continue
		}
		if err := o.apply(opt); err != nil {
			return err
		}
	}
	if o.AcRegMin > o.AcRegMax {
		return &OptionError{"acregmin", fmt.Sprintf("%v is more than acregmax %v", o.AcRegMin, o.AcRegMax)}
	}
	if o.AcDirMin > o.AcDirMax {
		return &OptionError{"acdirmin", fmt.Sprintf("%v is more than acdirmax %v", o.AcDirMin, o.AcDirMax)}
	}
	return nil
}

func (o *Options) apply(opt string) error {
	name, val, hasVal := strings.Cut(opt, "=")
	flag := func(p *bool, v bool) error {
		if hasVal {
			return &OptionError{opt, "takes no value"}
		}
		*p = v
		return nil
	}
	uintVal := func(max uint64) (uint64, error) {
		if !hasVal || val == "" {
			return 0, &OptionError{opt, "needs a value"}
		}
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil || n > max {
			return 0, &OptionError{opt, fmt.Sprintf("want a whole number from 0 to %d", max)}
		}
		return n, nil
	}
	seconds := func(p *time.Duration) error {
		n, err := uintVal(1 << 31)
		if err != nil {
			return err
		}
		*p = time.Duration(n) * time.Second
		return nil
	}
	switch name {
	case "vers", "nfsvers":
		switch val {
		case "3":
			o.Vers = 3
		case "4", "4.1":
			o.Vers = 4 // NFSv4 is minor version 1 here: 4.0 has no sessions
		default:
			return &OptionError{opt, "NFS versions 3 and 4.1 (vers=4 means 4.1) are supported"}
		}
	case "port":
		n, err := uintVal(65535)
		if err != nil {
			return err
		}
		o.Port = int(n)
	case "mountport":
		n, err := uintVal(65535)
		if err != nil {
			return err
		}
		o.MountPort = int(n)
	case "proto", "mountproto":
		if val != "tcp" {
			return &OptionError{opt, "only tcp is supported"}
		}
		o.Proto = val
	case "tcp":
		return flag(new(bool), true)
	case "udp":
		return &OptionError{opt, "only tcp is supported"}
	case "rsize", "wsize":
		n, err := uintVal(1 << 30)
		if err != nil {
			return err
		}
		if n != 0 && n < 4096 {
			return &OptionError{opt, "must be at least 4096"}
		}
		if name == "rsize" {
			o.Rsize = uint32(n)
		} else {
			o.Wsize = uint32(n)
		}
	case "timeo":
		n, err := uintVal(6000)
		if err != nil {
			return err
		}
		if n == 0 {
			return &OptionError{opt, "must be positive (tenths of a second)"}
		}
		o.Timeo = time.Duration(n) * 100 * time.Millisecond
	case "retrans":
		n, err := uintVal(1000)
		if err != nil {
			return err
		}
		o.Retrans = int(n)
	case "hard":
		return flag(&o.Hard, true)
	case "soft":
		return flag(&o.Hard, false)
	case "intr", "nointr":
		return flag(new(bool), true) // calls are always interruptible, as in Linux since 2.6.25
	case "ro":
		return flag(&o.ReadOnly, true)
	case "rw":
		return flag(&o.ReadOnly, false)
	case "ac":
		return flag(&o.NoAC, false)
	case "noac":
		return flag(&o.NoAC, true)
	case "actimeo":
		var d time.Duration
		if err := seconds(&d); err != nil {
			return err
		}
		o.AcRegMin, o.AcRegMax, o.AcDirMin, o.AcDirMax = d, d, d, d
	case "acregmin":
		return seconds(&o.AcRegMin)
	case "acregmax":
		return seconds(&o.AcRegMax)
	case "acdirmin":
		return seconds(&o.AcDirMin)
	case "acdirmax":
		return seconds(&o.AcDirMax)
	case "negtimeo":
		return seconds(&o.NegTimeo)
	case "delegidle":
		return seconds(&o.DelegIdle)
	case "delegmax":
		n, err := uintVal(1 << 24)
		if err != nil {
			return err
		}
		o.DelegMax = int(n)
	case "lookupcache":
		switch val {
		case "all":
			o.LookupCache = LookupCacheAll
		case "positive", "pos":
			o.LookupCache = LookupCachePositive
		case "none":
			o.LookupCache = LookupCacheNone
		default:
			return &OptionError{opt, "want all, positive or none"}
		}
	case "cto":
		return flag(&o.CTO, true)
	case "nocto":
		return flag(&o.CTO, false)
	case "rdirplus":
		return flag(&o.RdirPlus, true)
	case "nordirplus":
		return flag(&o.RdirPlus, false)
	case "allow_other":
		return flag(&o.AllowOther, true)
	case "suid":
		return flag(&o.NoSuid, false)
	case "nosuid":
		return flag(&o.NoSuid, true)
	case "dev":
		return flag(&o.NoDev, false)
	case "nodev":
		return flag(&o.NoDev, true)
	case "exec":
		return flag(&o.NoExec, false)
	case "noexec":
		return flag(&o.NoExec, true)
	case "noatime":
		return flag(&o.NoAtime, true)
	case "atime", "relatime", "norelatime", "strictatime", "lazytime", "nolazytime":
		return flag(&o.NoAtime, false)
	case "fuse_writeback_cache":
		return flag(&o.KernelWriteback, true)
	case "sync":
		return flag(&o.Sync, true)
	case "async":
		return flag(&o.Sync, false)
	case "defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail":
		// mount(8) and fstab bookkeeping; they do not change the client.
		return nil
	default:
		if strings.HasPrefix(name, "x-") || strings.HasPrefix(name, "comment=") {
			return nil // fstab annotations for other tools (x-systemd.*)
		}
		return &OptionError{opt, "unknown option"}
	}
	return nil
}
