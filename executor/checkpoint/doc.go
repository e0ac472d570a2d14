// Package checkpoint keeps a workspace's content at points in time and
// puts it back: a checkpoint per turn of a chat, and a restore when the
// chat's history returns to an earlier turn.
//
// A Store is one chat's: a directory on the gateway's host that no sandbox
// mounts, holding the content of the files once each (objects/, named by
// their SHA-256) and one manifest per checkpoint (every path with its kind,
// mode, modification time and content hash, or its link target).
//
// Take walks the workspace without following a symlink (every directory is
// opened below its parent's descriptor with O_NOFOLLOW, every entry is
// lstat-ed), so nothing the agent plants makes it read outside the
// workspace. A file whose inode, size, modification and change times are
// those of the previous checkpoint is not read again; a changed one is
// copied into the store while it is hashed, zero blocks left as holes, so
// an unchanged file costs nothing to store again and a sparse one little.
// Directories, regular files and symlinks are kept; FIFOs, devices and
// sockets are not, and the manifest lists them as skipped; files that
// share an inode (hard links) are kept as separate files.
//
// Restore makes the workspace the checkpoint's: it removes what the
// checkpoint does not have, without following a link, and writes what
// differs into a temporary file beside its place that is then renamed
// over it, so a file is either the old one or the restored one. It is meant
// to run while no agent process runs in the workspace, which makes the
// whole restore atomic to the agent.
//
// Options bound a Store in checkpoints and in bytes; the oldest go first,
// with the objects no remaining checkpoint uses. A checkpoint whose new
// content alone passes the byte bound is refused (ErrTooLarge) and nothing
// of it is kept.
//
// Concurrency: the methods of one Store must not run at once (the caller
// holds the chat's lease); Stores of different chats are independent.
package checkpoint
