#!/usr/bin/env bash
# Regenerates engine/api/v1 from engine.proto with the plugin versions pinned
# in tools/go.mod. With --check it fails when the checked-in code differs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$root/tools" && go build -o "$bin/" google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc)
out="$root/engine/api/v1"
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d); trap 'rm -rf "$bin" "$out"' EXIT
fi
PATH="$bin:$PATH" protoc -I "$root/engine/api/v1" \
  --go_out="$out" --go_opt=paths=source_relative \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
  "$root/engine/api/v1/engine.proto"
if [ "${1:-}" = "--check" ]; then
  for f in engine.pb.go engine_grpc.pb.go; do
    if ! diff -u "$root/engine/api/v1/$f" "$out/$f"; then
      echo "engine/api/v1/$f is stale: run tools/genproto.sh" >&2; exit 1
    fi
  done
fi
