#!/usr/bin/env bash
# Builds the sandbox image for the claude runner (AGENT=claude, the default)
# or the codex runner (AGENT=codex) without any registry pull: the root
# filesystem is assembled on the host from
#   - Debian's busybox-static (the userland: sh, ls, cat, timeout, ...),
#   - bash and the shared libraries ldd lists for it (both CLIs run the
#     agent's commands with bash),
#   - the CLI's native binary from the npm registry at a pinned version: for
#     claude @anthropic-ai/claude-code-linux-x64's, with the shared libraries
#     ldd lists for it; for codex @openai/codex's platform package
#     (@openai/codex@<version>-linux-x64, the optional dependency
#     @openai/codex-linux-x64 of @openai/codex): its static musl binary and
#     the ripgrep it ships, in the package's own layout,
#   - CA certificates, a non-root user "agent" (1000:1000), /workspace,
#   - the agentbox helper (static Go binary) when HELPER=path is given,
# and imported with `docker import`.
#
# Usage: examples/images/build-offline.sh [TAG]
# Environment:
#   AGENT                claude (default) or codex
#   CLAUDE_CODE_VERSION  pinned claude version (default: the one in VERSIONS)
#   CLAUDE_BIN           an installed native claude binary of that version to use
#                        (e.g. from `npm install -g @anthropic-ai/claude-code`)
#   CODEX_VERSION        pinned codex version (default: the one in VERSIONS)
#   CODEX_VENDOR         an installed codex platform directory of that version to
#                        use (the one holding bin/codex and codex-path/, e.g. from
#                        `npm install -g @openai/codex`)
#   HELPER               path of a linux/amd64 agentbox-helper binary to bake in
#   CACHE_DIR            where the npm tarballs are kept (default ~/.cache/agentbox)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=VERSIONS
. "$here/VERSIONS"
agent=${AGENT:-claude}
case "$agent" in
claude) version=${CLAUDE_CODE_VERSION:-$CLAUDE_CODE_VERSION_PINNED} ;;
codex) version=${CODEX_VERSION:-$CODEX_VERSION_PINNED} ;;
*) echo "build-offline: AGENT=$agent: use claude or codex" >&2; exit 1 ;;
esac
tag=${1:-agentbox/sandbox-$agent:latest}
cache=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agentbox}

die() { echo "build-offline: $*" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || die "only linux/amd64 hosts are supported (this is $(uname -m))"
command -v docker >/dev/null || die "docker is not installed; run .ci/run or install docker.io"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] && file -L "$busybox" | grep -q 'statically linked' ||
	die "a static busybox is required: apt-get install busybox-static"
bash_bin=$(command -v bash)

# npm_fetch NAME SPEC FILE: the npm package SPEC unpacked in $cache/NAME,
# unless $cache/NAME/package/FILE is there already.
mkdir -p "$cache"
npm_fetch() {
	local pkg="$cache/$1"
	[ -e "$pkg/package/$3" ] && return
	command -v npm >/dev/null || die "npm is required to fetch $2"
	rm -rf "$pkg.tmp" && mkdir -p "$pkg.tmp"
	(cd "$pkg.tmp" && npm pack --silent "$2" >/dev/null && tar xzf ./*.tgz && rm -f ./*.tgz)
	rm -rf "$pkg" && mv "$pkg.tmp" "$pkg"
}

# The CLI's native binary: CLAUDE_BIN or CODEX_VENDOR, or the platform
# package from the npm registry, cached.
if [ "$agent" = claude ]; then
	if [ -n "${CLAUDE_BIN:-}" ]; then
		claude_bin=$(readlink -f "$CLAUDE_BIN")
	else
		npm_fetch "claude-code-linux-x64-$version" "@anthropic-ai/claude-code-linux-x64@$version" claude
		claude_bin=$cache/claude-code-linux-x64-$version/package/claude
	fi
	file -L "$claude_bin" | grep -q 'ELF 64-bit' || die "$claude_bin is not the CLI's native linux binary"
	got=$("$claude_bin" --version 2>/dev/null | awk '{print $1}')
	[ "$got" = "$version" ] || die "$claude_bin reports version '$got', want $version (remove the cached package or fix CLAUDE_BIN)"
else
	triple=x86_64-unknown-linux-musl
	if [ -n "${CODEX_VENDOR:-}" ]; then
		codex_dir=$(readlink -f "$CODEX_VENDOR")
	else
		npm_fetch "codex-linux-x64-$version" "@openai/codex@$version-linux-x64" "vendor/$triple/bin/codex"
		codex_dir=$cache/codex-linux-x64-$version/package/vendor/$triple
	fi
	file -L "$codex_dir/bin/codex" | grep -q 'ELF 64-bit.*static' || die "$codex_dir/bin/codex is not the CLI's static linux binary"
	got=$("$codex_dir/bin/codex" --version 2>/dev/null | awk '{print $2}')
	[ "$got" = "$version" ] || die "$codex_dir/bin/codex reports version '$got', want $version (remove the cached package or fix CODEX_VENDOR)"
fi

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
if [ "$agent" = claude ]; then
	copy_with_libs "$claude_bin" /usr/local/bin/claude
else
	# The package's layout: the CLI finds its ripgrep (codex-path) beside
	# its own binary. Static binaries: no libraries to copy. The sandbox's
	# bubblewrap, the voice and code-mode hosts stay out: the runner turns
	# the CLI's own sandbox off, and the rest are interactive features.
	mkdir -p "$root/usr/local/lib/codex/bin" "$root/usr/local/lib/codex/codex-path"
	cp "$codex_dir/bin/codex" "$root/usr/local/lib/codex/bin/codex"
	cp "$codex_dir/codex-path/rg" "$root/usr/local/lib/codex/codex-path/rg"
	cp "$codex_dir/codex-package.json" "$root/usr/local/lib/codex/codex-package.json"
	ln -s ../lib/codex/bin/codex "$root/usr/local/bin/codex"
	ln -s ../lib/codex/codex-path/rg "$root/usr/local/bin/rg"
	# The CLI runs the agent's commands with LC_ALL=C.UTF-8; without glibc's
	# C.UTF-8 locale every command's output starts with bash's warning.
	[ -d /usr/lib/locale/C.utf8 ] || die "glibc's C.UTF-8 locale is missing at /usr/lib/locale/C.utf8 (Debian's libc-bin has it)"
	mkdir -p "$root/usr/lib/locale"
	cp -r /usr/lib/locale/C.utf8 "$root/usr/lib/locale/"
fi

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

# The label naming the CLI's version, which the e2e tests read.
label=claude-code-version
if [ "$agent" = codex ]; then
	label=codex-version
fi
chown -R 0:0 "$root"
chown 1000:1000 "$root/home/agent" "$root/workspace"
tar --numeric-owner -C "$root" -c . |
	docker import \
		-c 'ENV PATH=/usr/local/bin:/bin' \
		-c 'ENV HOME=/home/agent' \
		-c 'ENV SHELL=/bin/bash' \
		-c 'USER 1000:1000' \
		-c 'WORKDIR /workspace' \
		-c "LABEL io.agentbox.image.$label=$version" \
		-c "LABEL io.agentbox.image.inputs=${IMAGE_INPUTS:-}" \
		-m "agentbox offline sandbox image ($label $version)" \
		- "$tag" >/dev/null
echo "build-offline: built $tag ($label $version$([ -n "${HELPER:-}" ] && echo ", helper baked in"))"
