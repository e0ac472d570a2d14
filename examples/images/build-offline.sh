#!/usr/bin/env bash
# Builds the sandbox image for the claude runner without any registry pull:
# the root filesystem is assembled on the host from
#   - Debian's busybox-static (the userland: sh, ls, cat, timeout, ...),
#   - bash and the shared libraries ldd lists for it (Claude Code's Bash tool
#     runs commands with bash),
#   - the Claude Code CLI's native binary from the npm registry at a pinned
#     version, with the shared libraries ldd lists for it,
#   - CA certificates, a non-root user "agent" (1000:1000), /workspace,
#   - the agentbox helper (static Go binary) when HELPER=path is given,
# and imported with `docker import`.
#
# Usage: examples/images/build-offline.sh [TAG]
# Environment:
#   CLAUDE_CODE_VERSION  pinned CLI version (default: the one in VERSIONS)
#   CLAUDE_BIN           an installed native CLI binary of that version to use
#                        (e.g. from `npm install -g @anthropic-ai/claude-code`)
#   HELPER               path of a linux/amd64 agentbox-helper binary to bake in
#   CACHE_DIR            where the npm tarball is kept (default ~/.cache/agentbox)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=VERSIONS
. "$here/VERSIONS"
version=${CLAUDE_CODE_VERSION:-$CLAUDE_CODE_VERSION_PINNED}
tag=${1:-agentbox/sandbox-claude:latest}
cache=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agentbox}

die() { echo "build-offline: $*" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || die "only linux/amd64 hosts are supported (this is $(uname -m))"
command -v docker >/dev/null || die "docker is not installed; run .ci/run or install docker.io"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] && file -L "$busybox" | grep -q 'statically linked' ||
	die "a static busybox is required: apt-get install busybox-static"
bash_bin=$(command -v bash)

# The CLI's native binary: CLAUDE_BIN, or the platform package from the npm
# registry, cached.
mkdir -p "$cache"
pkg="$cache/claude-code-linux-x64-$version"
if [ -n "${CLAUDE_BIN:-}" ]; then
	claude_bin=$(readlink -f "$CLAUDE_BIN")
elif [ ! -x "$pkg/package/claude" ]; then
	command -v npm >/dev/null || die "npm is required to fetch @anthropic-ai/claude-code-linux-x64@$version"
	rm -rf "$pkg.tmp" && mkdir -p "$pkg.tmp"
	(cd "$pkg.tmp" && npm pack --silent "@anthropic-ai/claude-code-linux-x64@$version" >/dev/null &&
		tar xzf anthropic-ai-claude-code-linux-x64-"$version".tgz && rm -f ./*.tgz)
	rm -rf "$pkg" && mv "$pkg.tmp" "$pkg"
fi
claude_bin=${claude_bin:-$pkg/package/claude}
file -L "$claude_bin" | grep -q 'ELF 64-bit' || die "$claude_bin is not the CLI's native linux binary"
got=$("$claude_bin" --version 2>/dev/null | awk '{print $1}')
[ "$got" = "$version" ] || die "$claude_bin reports version '$got', want $version (remove $pkg or fix CLAUDE_BIN)"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,usr/local/bin,etc/ssl/certs,tmp,workspace,home/agent,lib64,lib/x86_64-linux-gnu,var/run/agentbox,opt/agentbox}
chmod 1777 "$root/tmp"

# busybox and its applets as symlinks.
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
	[ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

# A binary plus every shared library ldd lists for it, at the same paths.
copy_with_libs() {
	local src=$1 dst=$2
	cp "$src" "$root$dst"
	ldd "$src" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | while read -r lib; do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
}
rm -f "$root/bin/bash"
copy_with_libs "$bash_bin" /bin/bash
copy_with_libs "$claude_bin" /usr/local/bin/claude

if [ -n "${HELPER:-}" ]; then
	file "$HELPER" | grep -q 'statically linked' || die "HELPER=$HELPER is not a static binary (build it with CGO_ENABLED=0)"
	cp "$HELPER" "$root/usr/local/bin/agentbox-helper"
	ln -s agentbox-helper "$root/usr/local/bin/abx"
fi

cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
cat >"$root/etc/passwd" <<PASSWD
root:x:0:0:root:/root:/bin/sh
agent:x:1000:1000:agent:/home/agent:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$root/etc/group" <<GROUP
root:x:0:
agent:x:1000:
nogroup:x:65534:
GROUP
echo "hosts: files" >"$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"

chown -R 0:0 "$root"
chown 1000:1000 "$root/home/agent" "$root/workspace"
tar --numeric-owner -C "$root" -c . |
	docker import \
		-c 'ENV PATH=/usr/local/bin:/bin' \
		-c 'ENV HOME=/home/agent' \
		-c 'ENV SHELL=/bin/bash' \
		-c 'USER 1000:1000' \
		-c 'WORKDIR /workspace' \
		-c "LABEL io.agentbox.image.claude-code-version=$version" \
		-c "LABEL io.agentbox.image.inputs=${IMAGE_INPUTS:-}" \
		-m "agentbox offline sandbox image (claude-code $version)" \
		- "$tag" >/dev/null
echo "build-offline: built $tag (claude-code $version$([ -n "${HELPER:-}" ] && echo ", helper baked in"))"
