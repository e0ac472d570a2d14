#!/usr/bin/env bash
# mkpause.sh OUT.tar TAG builds internal/testkit/k8s/pause statically and packs it as a
# one-layer docker-archive tagged TAG, so no registry and no `docker build` are
# needed for the pod sandbox image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1 tag=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/root"
(cd "$here/pause" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags '-s -w' -o "$tmp/root/pause" .)
tar -C "$tmp/root" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$tmp/layer.tar" pause
diff=$(sha256sum "$tmp/layer.tar" | cut -d' ' -f1)
mkdir -p "$tmp/img/$diff"
mv "$tmp/layer.tar" "$tmp/img/$diff/layer.tar"
printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$diff" >"$tmp/config.json"
cfg=$(sha256sum "$tmp/config.json" | cut -d' ' -f1)
mv "$tmp/config.json" "$tmp/img/$cfg.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfg" "$tag" "$diff" >"$tmp/img/manifest.json"
tar -C "$tmp/img" --owner=0 --group=0 --numeric-owner -cf "$out.tmp" .
mv "$out.tmp" "$out"
