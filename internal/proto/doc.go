// Package proto is the seam between the caching client core
// (internal/client) and the NFS protocols under it: what a server can do
// for the core, in types no protocol owns.
//
// A protocol package (internal/proto/nfsv3; NFSv4.1 beside it) implements
// Server over internal/rpc and its codec. The core holds one Server per
// mount and never sees a protocol's types: handles are opaque bytes,
// attributes are Attr (with v4's change attribute where the protocol has
// one), what changed around an operation is Wcc (v3 wcc_data, v4
// change_info), listings are pages of DirEntry with cookies and a verifier,
// and a server's failure is an Error carrying the errno it means locally
// and the protocol's name for it.
//
// Every Server method is one call on the wire for NFSv3, so the core's
// per-procedure counts are the protocol's. A protocol that can do more in a
// round trip (NFSv4.1 compounds) or keeps state the core must drive (opens,
// locks, delegations) offers it through the optional interfaces in
// state.go, which the core discovers by type assertion.
//
// Results follow one rule: the error a method returns means the call got
// no usable answer (the connection, a timeout, an undecodable reply); a
// server that answered with a failure sets the result's Status instead,
// and the result carries whatever else the answer held (v3 returns
// attributes and wcc data with most failures, and the core uses them).
// Byte slices in results (names, handles, link targets) may alias the
// reply's buffer, which is never reused; the core copies what it keeps.
package proto
