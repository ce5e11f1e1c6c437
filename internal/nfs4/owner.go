package nfs4

import (
	"bytes"
	"strconv"
)

// Owners and groups (the owner and owner_group attributes, and the who of
// an ACE) are strings: either "user@domain", mapped by an id mapper, or a
// plain decimal id ("1000"), as Linux sends with nfs4_disable_idmapping and
// servers send when they have no name for an id (RFC 8881 §5.9). These
// helpers take them apart; resolving names is the caller's.

// AppendID appends the numeric form of id ("1000"). A server keeps a
// buffer per worker for it, so encoding attributes allocates nothing.
func AppendID(b []byte, id uint32) []byte { return strconv.AppendUint(b, uint64(id), 10) }

// ParseID returns the id of the numeric form: decimal digits without sign
// or leading zeros, within 32 bits. Anything else is not numeric.
func ParseID(s []byte) (uint32, bool) {
	if len(s) == 0 || len(s) > 10 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if v > 1<<32-1 {
		return 0, false
	}
	return uint32(v), true
}

// Owner is an owner string taken apart.
type Owner struct {
	// Numeric: the string is an id (ParseID), in ID.
	Numeric bool
	ID      uint32
	// Otherwise Name is the part before the last '@' (the whole string
	// when there is none) and Domain the part after it (nil when there is
	// none). Both alias the string.
	Name   []byte
	Domain []byte
}

// ParseOwner takes an owner or group string apart.
func ParseOwner(s []byte) Owner {
	if id, ok := ParseID(s); ok {
		return Owner{Numeric: true, ID: id}
	}
	if i := bytes.LastIndexByte(s, '@'); i >= 0 {
		return Owner{Name: s[:i], Domain: s[i+1:]}
	}
	return Owner{Name: s}
}

// AppendOwner appends name@domain, the mapped form.
func AppendOwner(b []byte, name, domain string) []byte {
	b = append(b, name...)
	b = append(b, '@')
	return append(b, domain...)
}
