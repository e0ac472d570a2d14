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
// those of the previous checkpoint is not read again. That is safe against
// the agent: it can set a file's mtime (utimes), but every write, chmod or
// utimes sets the ctime to the kernel's clock, which it cannot set back
// (that takes the host's clock or a raw write to the device); a file
// replaced by another has a new ctime too, whatever inode number it
// reuses; and no write falls in the clock tick of the checkpoint's own
// stat, as no agent process runs while a checkpoint is taken. A changed
// file is copied into the store while it is hashed, zero blocks left as
// holes, so an unchanged file costs nothing to store again and a sparse
// one little.
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
// Speed: a checkpoint's cost is its walk (an fstatat per entry, 20,000 in
// the benchmark's workspace, on four walkers), the previous manifest (kept
// decoded in a small cache of recent manifests with its path index, else
// decoded from one read into one string) and the new one written. The
// walk lists each directory in name order and lays the tree out in path
// order, so the manifest needs no sort of all its entries (which cost 7-8
// ms of a take), it is compared with its parent by a merge, not lookups,
// and an unchanged entry shares its path with the previous manifest. A restore's is a walk of the workspace
// (a stat per entry: the agent may have changed anything) and the files
// that differ; copy_file_range does the copying, which XFS and Btrfs turn
// into a reflink.
//
// Why this mechanism. BenchmarkMechanisms runs the others on
// BenchmarkCheckpoint's workspace (20,000 files, 477 MB) and turns (ten
// files changed); p50 on this 2-core machine, shared and loaded (load
// average 20-40), store and tar in one run, git in the next:
//
//   - a shadow Git repository (the git binary, GIT_DIR outside the
//     workspace): first commit 30-37 s, take 539 ms (0.022% new
//     storage), restore ten files away (reset --hard, clean) 880-1,067
//     ms; with its automatic gc on, a take hit 1.9 s. Git compresses and
//     hashes every new file on the first commit, keeps no mode but the
//     execute bit and no empty directory, and follows its own rules
//     (.gitignore, a nested repository the agent plants is skipped);
//   - tar with a manifest (GNU tar's --listed-incremental): level 0 in
//     4.2 s, take 399 ms (0.086% new), restore 11.2 s. A level holds what
//     changed, but going back to any level means extracting level 0 and
//     every level after it: a restore ten files away costs the whole
//     tree;
//   - this store: take 272 ms (0.008% new), restore ten files away
//     273 ms, restore all 5.9 s against `cp -a`'s 7.1 s in the same run
//     (0.83x); on a quieter run, take 165 ms and restore 158 ms.
//
// This store restores ten files in the time of a stat walk, keeps every
// mode, link, empty directory and odd name, and is one Go package, with
// no binary to ship or version in every backend. Overlay snapshots were
// not measured: they need a mount per checkpoint on the host, a privilege
// the store otherwise does without.
//
// Concurrency: the methods of one Store must not run at once (the caller
// holds the chat's lease); Stores of different chats are independent.
package checkpoint
