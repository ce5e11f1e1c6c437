package fusefs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// FSType is the file system type of a hushfs mount, as /proc/mounts shows
// it.
const FSType = "fuse." + fsSubtype

const fsSubtype = "hushfs"

// MountInfo is one line of /proc/self/mountinfo.
type MountInfo struct {
	Major, Minor uint32 // the mount's device (its FUSE connection)
	Mountpoint   string
	FSType       string
	Source       string
	// Owner is the user a FUSE mount belongs to (user_id= in its super
	// options), when the line names one.
	Owner    uint32
	HasOwner bool
}

// ErrNotMounted says nothing is mounted at a path.
var ErrNotMounted = errors.New("not a mount point")

// FindMount returns the topmost mount at mountpoint (a clean absolute
// path) from the mountinfo file at path (normally /proc/self/mountinfo).
// It reads only that file, never the mount itself, so it works while the
// file system does not answer.
func FindMount(path, mountpoint string) (MountInfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return MountInfo{}, err
	}
	var found *MountInfo
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		mi, err := parseMountInfo(sc.Text())
		if err != nil {
			return MountInfo{}, fmt.Errorf("%s: %w", path, err)
		}
		if mi.Mountpoint == mountpoint {
			found = &mi // later lines are mounted on top of earlier ones
		}
	}
	if err := sc.Err(); err != nil {
		return MountInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	if found == nil {
		return MountInfo{}, fmt.Errorf("%s: %w", mountpoint, ErrNotMounted)
	}
	return *found, nil
}

// parseMountInfo parses one mountinfo line (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func parseMountInfo(line string) (MountInfo, error) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if len(f) < 6 || sep < 0 || sep+2 >= len(f) {
		return MountInfo{}, fmt.Errorf("malformed mountinfo line %q", line)
	}
	maj, min, ok := strings.Cut(f[2], ":")
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(min, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return MountInfo{}, fmt.Errorf("malformed device %q in mountinfo line %q", f[2], line)
	}
	m := MountInfo{
		Major: uint32(ma), Minor: uint32(mi),
		Mountpoint: unescapeOctal(f[4]),
		FSType:     unescapeOctal(f[sep+1]),
		Source:     unescapeOctal(f[sep+2]),
	}
	if sep+3 < len(f) {
		for _, o := range strings.Split(f[sep+3], ",") {
			if v, ok := strings.CutPrefix(o, "user_id="); ok {
				if uid, err := strconv.ParseUint(v, 10, 32); err == nil {
					m.Owner, m.HasOwner = uint32(uid), true
				}
			}
		}
	}
	return m, nil
}

// unescapeOctal undoes the kernel's \ooo escaping of space, tab, newline
// and backslash in mount table fields.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
