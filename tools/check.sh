#!/usr/bin/env bash
# Drift checks: everything generated or formatted by a pinned tool must be
# exactly what that tool produces from the checked-in sources. Runs every
# check, prints what drifted and how to fix it, and exits 1 if any failed.
#
#   gazelle     BUILD.bazel files and MODULE.bazel use_repo (tools/gazelle.sh)
#   buildifier  formatting and lint of BUILD.bazel, MODULE.bazel, *.bzl
#   genproto    engine/api/v1 generated Go code (tools/genproto.sh)
#   gofmt       every non-generated Go file
#   go_sdk      the Bazel Go SDK satisfies the go directive of go.mod
#   targets     the design's target names //e2e/soak:run and
#               //e2e/soak:harness_test exist and name targets that exist
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

check_buildifier() {
  # -r walks the whole tree (it skips only .git and symlinked directories such
  # as Bazel's bazel-* output links); -lint=warn also fails on lint findings.
  go tool -modfile=tools/go.mod buildifier -mode=check -lint=warn -r .
}

check_gofmt() {
  local gofmt files=() bad
  gofmt="$(go env GOROOT)/bin/gofmt"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.go')
  else
    mapfile -t files < <(find . -path ./.git -prune -o -name 'bazel-*' -prune -o -name '*.go' -type f -print | sed 's#^\./##')
  fi
  local keep=() f
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue # deleted in the work tree but still in the index
    case "/$f" in */testdata/*) continue ;; esac
    # Generated files (the Go convention: "// Code generated ... DO NOT EDIT.")
    # are whatever their generator wrote; genproto checks those.
    if grep -qE '^// Code generated .* DO NOT EDIT\.$' "$f"; then continue; fi
    keep+=("$f")
  done
  [ "${#keep[@]}" -gt 0 ] || return 0
  bad=$("$gofmt" -l "${keep[@]}")
  if [ -n "$bad" ]; then
    echo "not gofmt-formatted (run gofmt -w on them):" >&2
    printf '  %s\n' $bad >&2
    return 1
  fi
}

check_go_sdk() {
  local gomod sdk
  gomod=$(go mod edit -json | sed -n 's/^\t"Go": "\(.*\)",$/\1/p')
  sdk=$(sed -n 's/^go_sdk\.download(version = "\(.*\)")$/\1/p' MODULE.bazel)
  if [ -z "$gomod" ] || [ -z "$sdk" ]; then
    echo "cannot read the go directive of go.mod ($gomod) or go_sdk.download of MODULE.bazel ($sdk)" >&2
    return 1
  fi
  if [ "$(printf '%s\n%s\n' "$gomod" "$sdk" | sort -V | head -n1)" != "$gomod" ]; then
    echo "MODULE.bazel go_sdk.download(version = \"$sdk\") is older than go.mod's go $gomod" >&2
    return 1
  fi
  echo "go_sdk $sdk satisfies go $gomod"
}

check_design_targets() {
  # Gazelle keeps these two hand-written rules (# keep) but would not notice
  # them deleted or renamed, nor a label of theirs that no longer exists.
  # The greps read buildifier's canonical form, which check_buildifier holds
  # every BUILD file to.
  local build=e2e/soak/BUILD.bazel name label pkg target bad=0
  for name in run harness_test; do
    if ! grep -Eq "^    name = \"$name\",( +# keep)?$" "$build"; then
      echo "$build: no target named $name (//e2e/soak:$name is a target name of the design)" >&2
      bad=1
    fi
  done
  # The alias's actual and every test of the suite.
  for label in $(sed -n 's/^    actual = "\(\/\/[^"]*\)",$/\1/p' "$build") \
    $(sed -n '/^test_suite(/,/^)/p' "$build" | sed -n 's/^ *"\(\/\/[^"]*\)",$/\1/p'); do
    pkg=${label#//}
    pkg=${pkg%%:*}
    target=${label##*:}
    [ "$target" != "$label" ] || target=${pkg##*/}
    if ! grep -Eq "^    name = \"$target\",( +# keep)?$" "$pkg/BUILD.bazel" 2>/dev/null; then
      echo "$build: $label is not declared in $pkg/BUILD.bazel" >&2
      bad=1
    fi
  done
  [ "$bad" -eq 0 ] || return 1
  echo "//e2e/soak:run and //e2e/soak:harness_test name targets that exist"
}

failed=()
check() {
  local name=$1
  shift
  echo "--- check: $name"
  # A subshell with errexit of its own: a failing command inside a check ends
  # that check (not silently continues), and the next check still runs.
  set +e
  (
    set -euo pipefail
    "$@"
  )
  local rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    echo "--- check: $name FAILED" >&2
    failed+=("$name")
  else
    echo "--- check: $name ok"
  fi
}

check gazelle tools/gazelle.sh --check
check buildifier check_buildifier
check genproto tools/genproto.sh --check
check gofmt check_gofmt
check go_sdk check_go_sdk
check targets check_design_targets

if [ "${#failed[@]}" -gt 0 ]; then
  echo "drift checks failed: ${failed[*]}" >&2
  exit 1
fi
echo "drift checks passed"
