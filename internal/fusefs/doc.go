// Package fusefs adapts the kernel's FUSE requests (go-fuse's raw API,
// fuse.RawFileSystem) onto the caching NFS client core, internal/client. It
// is conversion only: node IDs are the core's, every result and every
// timeout comes from the core, and every error becomes an errno through
// client.Errno. Nothing here caches file system state.
//
// # Who caches what
//
// The core is the single source of truth. The kernel keeps three caches of
// its own in front of it, and each is bounded by what the core says; the
// adapter hands the core's lifetimes on unchanged, never longer:
//
//   - Dentries and negative dentries: valid for Entry.EntryTTL, which the
//     core derives from the directory's attribute cache lifetime (and
//     negtimeo for a name that does not exist; zero with lookupcache=none
//     or positive, or noac, so the kernel asks again every time).
//   - Inode attributes: valid for Entry.AttrTTL or the TTL GetAttr and
//     SetAttr return, the core's attribute cache lifetime for the node
//     (zero with noac, so the kernel asks every time).
//   - Page cache: kept across opens only when the core's Open says the file
//     is unchanged since its pages were read (FOPEN_KEEP_CACHE, the core's
//     close-to-open check); the kernel also drops a file's pages by itself
//     when attributes it is handed show another size or mtime
//     (CAP_AUTO_INVAL_DATA, go-fuse's default).
//   - Directory contents (FOPEN_CACHE_DIR): an unchanged directory is
//     listed from the kernel's page cache, with no READDIR request. Kept
//     across opens (FOPEN_KEEP_CACHE) while the core holds the directory's
//     complete listing for its current version and the names a plus
//     listing gave the kernel have not expired; the core tells the kernel to
//     drop them when it learns of another version (client.FS.DirCache). The
//     kernel also drops them itself when the directory's mtime or its own
//     change counter (every change made through the mount) moves.
//
// Writes are not cached by the kernel (no CAP_WRITEBACK_CACHE unless the
// fuse_writeback_cache option asks, for comparison; see DEVELOPERS.md): each
// write(2) reaches the core, which holds the data and writes it back
// (UNSTABLE WRITEs, COMMIT at close), so size, mtime and close-to-open stay
// decided in one place. Symbolic links are cached by the kernel
// (CAP_CACHE_SYMLINKS): a node ID names one server file handle and is never
// reused, and a symbolic link's target cannot change without it becoming
// another file, so a cached target never goes stale.
//
// # Permissions and credentials
//
// The server enforces permissions on every call, and the kernel also checks
// mode bits from our attributes (default_permissions): without it the
// kernel never asks about search permission on a path it has cached, so a
// name one user looked up would be reachable by another through a directory
// it may not search. Each request carries the caller's uid, gid and
// supplementary groups (read from /proc/PID/status, which FUSE does not
// pass; cached for a second), and the core sends them as AUTH_SYS.
//
// # Cancellation
//
// A request waiting for the server fails with EINTR when its caller is
// interrupted by a signal, as on an NFS mount with intr: the caller has a
// signal pending that it neither blocks nor ignores (a killed caller
// included). Notifications are the exception (SIGURG, SIGCHLD, SIGWINCH,
// SIGCONT: ignored or continuing by default): the Go runtime sends SIGURG
// to its own threads all the time to preempt goroutines, a process with
// children gets SIGCHLD at any time, and the kernel passes either on as an
// INTERRUPT of whatever request the thread waits for. close and
// fsync write back regardless: an interrupted close does not take the
// file's data with it. See reqCtx.
//
// # Statistics
//
// The daemon serves the core's per-procedure RPC statistics, and the
// kernel's requests that reached it by operation, on a Unix socket named by
// the mount's device in RuntimeDir of the mount's owner (/run/hushfs for
// root); only root and the owner may connect. `hushfs stats MNT` finds it
// from the mount table, never touching the mount (control.go).
//
// # Extended attributes
//
// There are none (NFSv3 has none): the xattr requests answer ENOSYS, so
// the kernel stops sending them after the first and answers EOPNOTSUPP
// itself (xattr.go).
//
// # Mount options
//
// MountOptions documents each go-fuse option chosen and why.
package fusefs
