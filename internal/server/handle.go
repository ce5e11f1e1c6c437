package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// File handle layout (all integers big-endian), version 2, issued whenever
// the kernel handle type fits a byte (every Linux file system's does):
//
//	[0]        version (fhVersion)
//	[1:3]      export id (fhShortID of the 32-bit id)
//	[3]        kernel handle type (struct file_handle.handle_type)
//	[4:n-12]   kernel handle bytes (struct file_handle.f_handle)
//	[n-12:n]   MAC: HMAC-SHA256 over bytes [0:n-12], truncated
//
// Version 1, issued before and still accepted (clients keep handles across
// a server upgrade), had a 4-byte export id and a 4-byte type: 5 bytes
// more per handle. Handle size counts: a READDIRPLUS reply carries one per
// entry, and with ext4's 8-byte kernel handles the 24-byte version 2 handle
// fits about 6,700 entries in a 1 MiB reply instead of 6,400 (a listing of
// 100,000 names takes 15 calls, not 16).
//
// The kernel handle identifies the inode (number and generation on ext4), so
// it survives server restarts and is refused by the kernel once the inode is
// freed. The MAC is keyed by a per-export secret kept in the state directory:
// a client can only present handles this export issued, never a guessed or
// altered one, which matters because open_by_handle_at would otherwise open
// any inode of the whole file system, far outside the exported directory.
const (
	fhVersion     = 2
	fhHeaderLen   = 1 + 2 + 1
	fhVersion1    = 1
	fhHeaderLenV1 = 1 + 4 + 4
	fhMACLen      = 12
	// maxKernelHandle is what fits in an NFSv3 handle (64 bytes).
	maxKernelHandle = nfs3.FHSize - fhHeaderLenV1 - fhMACLen
)

// fhShortID is the export id as version 2 handles carry it. Another export
// with the same short id is still told apart by the MAC.
func fhShortID(id uint32) uint16 { return uint16(id>>16) ^ uint16(id) }

// secretLen is the size of the per-export MAC key.
const secretLen = 32

// handleCodec builds and checks file handles for one export.
type handleCodec struct {
	exportID uint32
	secret   []byte
	macs     sync.Pool // hash.Hash keyed by secret; Reset between uses
}

func newHandleCodec(secret []byte) *handleCodec {
	c := &handleCodec{secret: secret}
	c.macs.New = func() any { return hmac.New(sha256.New, c.secret) }
	id := c.derive("export-id")
	c.exportID = binary.BigEndian.Uint32(id[:4])
	return c
}

// derive returns HMAC(secret, label), for values that must be stable for the
// export but unguessable.
func (c *handleCodec) derive(label string, extra ...[]byte) [sha256.Size]byte {
	h := c.macs.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(label))
	for _, e := range extra {
		h.Write(e)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	c.macs.Put(h)
	return out
}

func (c *handleCodec) mac(body []byte) [sha256.Size]byte {
	h := c.macs.Get().(hash.Hash)
	h.Reset()
	h.Write(body)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	c.macs.Put(h)
	return out
}

// encode returns the NFS handle of a kernel handle.
func (c *handleCodec) encode(htype int32, kh []byte) (nfs3.FH, error) {
	if len(kh) == 0 || len(kh) > maxKernelHandle {
		return nil, fmt.Errorf("kernel file handle of %d bytes does not fit an NFSv3 handle (max %d)", len(kh), maxKernelHandle)
	}
	b := make([]byte, 0, fhHeaderLenV1+len(kh)+fhMACLen)
	if htype >= 0 && htype <= 0xff {
		b = append(b, fhVersion)
		b = binary.BigEndian.AppendUint16(b, fhShortID(c.exportID))
		b = append(b, byte(htype))
	} else {
		b = append(b, fhVersion1)
		b = binary.BigEndian.AppendUint32(b, c.exportID)
		b = binary.BigEndian.AppendUint32(b, uint32(htype))
	}
	b = append(b, kh...)
	m := c.mac(b)
	return append(b, m[:fhMACLen]...), nil
}

// headerLen returns the header length of fh's version, or 0 if fh does not
// have this export's shape (version, export id, length). The MAC is not
// checked.
func (c *handleCodec) headerLen(fh []byte) int {
	if len(fh) == 0 || len(fh) > nfs3.FHSize {
		return 0
	}
	switch fh[0] {
	case fhVersion:
		if len(fh) > fhHeaderLen+fhMACLen && binary.BigEndian.Uint16(fh[1:3]) == fhShortID(c.exportID) {
			return fhHeaderLen
		}
	case fhVersion1:
		if len(fh) > fhHeaderLenV1+fhMACLen && binary.BigEndian.Uint32(fh[1:5]) == c.exportID {
			return fhHeaderLenV1
		}
	}
	return 0
}

// precheck reports whether fh has this export's shape, without checking
// the MAC.
func (c *handleCodec) precheck(fh []byte) bool { return c.headerLen(fh) > 0 }

// decode verifies fh and returns the kernel handle it carries.
func (c *handleCodec) decode(fh []byte) (unix.FileHandle, error) {
	hl := c.headerLen(fh)
	if hl == 0 {
		return unix.FileHandle{}, nfs3.ErrBadHandle
	}
	body := fh[:len(fh)-fhMACLen]
	m := c.mac(body)
	if !hmac.Equal(m[:fhMACLen], fh[len(fh)-fhMACLen:]) {
		return unix.FileHandle{}, nfs3.ErrBadHandle
	}
	var htype int32
	if hl == fhHeaderLen {
		htype = int32(fh[3])
	} else {
		htype = int32(binary.BigEndian.Uint32(fh[5:9]))
	}
	return unix.NewFileHandle(htype, bytes.Clone(fh[hl:len(fh)-fhMACLen])), nil
}

// State file format: a few "key value" lines, so an administrator can see
// which export a file belongs to.
const stateMagic = "hushfs export secret v1"

// stateFileName is the name of the state file for the export at root: one
// file per exported path, so several servers may share a state directory.
func stateFileName(root string) string {
	sum := sha256.Sum256([]byte(root))
	return "export-" + hex.EncodeToString(sum[:8]) + ".key"
}

// loadOrCreateSecret returns the export's MAC key from dir, creating the
// directory and a fresh random key (mode 0600) on first use. A key file that
// others may read is refused: whoever knows the key can forge handles.
func loadOrCreateSecret(dir, root string) ([]byte, error) {
	if dir == "" {
		return nil, errors.New("no state directory configured")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	path := filepath.Join(dir, stateFileName(root))
	for range 2 {
		secret, err := readSecret(path)
		if err == nil {
			return secret, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		err = createSecret(dir, path, root)
		if err == nil || errors.Is(err, fs.ErrExist) {
			continue // created by us or by a concurrent server: read it back
		}
		return nil, err
	}
	return nil, fmt.Errorf("state file %s: could not be created or read", path)
}

func readSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("state file %s has mode %v: it must not be readable by group or others (chmod 600, and consider it leaked)", path, fi.Mode().Perm())
	}
	data := make([]byte, 4096)
	n, err := f.Read(data)
	if err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	lines := strings.Split(string(data[:n]), "\n")
	if len(lines) == 0 || lines[0] != stateMagic {
		return nil, fmt.Errorf("state file %s: not a hushfs export secret", path)
	}
	for _, l := range lines[1:] {
		if v, ok := strings.CutPrefix(l, "secret "); ok {
			s, err := hex.DecodeString(strings.TrimSpace(v))
			if err != nil || len(s) != secretLen {
				return nil, fmt.Errorf("state file %s: malformed secret", path)
			}
			return s, nil
		}
	}
	return nil, fmt.Errorf("state file %s: no secret", path)
}

// createSecret writes a new key to a temporary file and links it into place,
// so the file appears complete or not at all, and a concurrent creator's key
// is never overwritten (the link fails with EEXIST).
func createSecret(dir, path, root string) error {
	secret := make([]byte, secretLen)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("generating export secret: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".export-*.tmp")
	if err != nil {
		return fmt.Errorf("creating state file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("creating state file: %w", err)
	}
	content := fmt.Sprintf("%s\nroot %s\nsecret %s\n", stateMagic, root, hex.EncodeToString(secret))
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return fmt.Errorf("writing state file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing state file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing state file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // make the new name durable; a failure only risks a new key after a crash
		d.Close()
	}
	return nil
}
