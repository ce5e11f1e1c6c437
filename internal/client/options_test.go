package client

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultsAreNFS5Defaults(t *testing.T) {
	o, err := ParseOptions("")
	if err != nil {
		t.Fatal(err)
	}
	if o.Vers != 3 || !o.Hard || o.Timeo != 60*time.Second || o.Retrans != 2 ||
		o.AcRegMin != 3*time.Second || o.AcRegMax != time.Minute ||
		o.AcDirMin != 30*time.Second || o.AcDirMax != time.Minute ||
		!o.CTO || !o.RdirPlus || o.LookupCache != LookupCacheAll || o.ReadOnly {
		t.Fatalf("defaults differ from nfs(5): %+v", o)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions("vers=3,port=2049,mountport=20048,proto=tcp,rsize=65536,wsize=1048576," +
		"timeo=15,retrans=3,soft,ro,noac,lookupcache=positive,nocto,nordirplus,rw,actimeo=7,x-systemd.automount,_netdev")
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Port: 2049, MountPort: 20048, Rsize: 65536, Wsize: 1 << 20, Timeo: 1500 * time.Millisecond,
		Retrans: 3, Hard: false, NoAC: true, LookupCache: LookupCachePositive, CTO: false, RdirPlus: false,
		AcRegMin: 7 * time.Second, AcDirMax: 7 * time.Second}
	if o.Port != want.Port || o.MountPort != want.MountPort || o.Rsize != want.Rsize || o.Wsize != want.Wsize ||
		o.Timeo != want.Timeo || o.Retrans != want.Retrans || o.Hard || !o.NoAC || o.LookupCache != want.LookupCache ||
		o.CTO || o.RdirPlus || o.ReadOnly || o.AcRegMin != want.AcRegMin || o.AcDirMax != want.AcDirMax {
		t.Fatalf("got %+v", o)
	}
}

func TestBadOptionsNameTheOption(t *testing.T) {
	for _, s := range []string{"bogus", "vers=4.0", "vers=4.2", "vers=2", "vers=x", "timeo=0", "timeo=-1", "rsize=12",
		"lookupcache=maybe", "proto=udp", "hard=1", "port=70000", "acregmin=10,acregmax=5", "retrans="} {
		_, err := ParseOptions(s)
		var oe *OptionError
		if !errors.As(err, &oe) {
			t.Errorf("%q: err = %v, want an OptionError", s, err)
			continue
		}
		if !strings.Contains(err.Error(), strings.SplitN(s, ",", 2)[0][:3]) {
			t.Errorf("%q: message %q does not name the option", s, err)
		}
	}
}
