#!/usr/bin/env bash
# Regenerates the BUILD.bazel files from the Go sources with the gazelle pinned
# in tools/go.mod, then rewrites the go_deps use_repo list in MODULE.bazel to
# the external repositories those BUILD files name.
#
#   tools/gazelle.sh            rewrite BUILD.bazel files and MODULE.bazel
#   tools/gazelle.sh --check    change nothing; print the drift and exit 1
#
# Gazelle runs offline. Left to itself (`go tool -modfile=tools/go.mod gazelle`)
# it finds the module of each external import by running `go get` in a scratch
# module, which needs the network and sees the newest versions rather than
# ours. Here -external=static resolves every import against the modules that
# go.mod requires (one -known_import each), which are all the modules a
# package of this repository can be built from, and never looks further.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: tools/gazelle.sh [--check]" >&2; exit 2 ;;
esac

# The modules go.mod requires, direct and indirect ("Path" entries of the
# Require list of `go mod edit -json`, which reads go.mod only).
modules=$(go mod edit -json | sed -n '/"Require": \[/,/^\t\]/p' | sed -n 's/^[[:space:]]*"Path": "\(.*\)",\{0,1\}$/\1/p')
# The same, direct requirements only (no "// indirect").
direct=$(go mod edit -json | sed -n '/"Require": \[/,/^\t\]/p' |
  awk '/"Path":/ { p = $2; gsub(/[",]/, "", p) } /"Indirect": true/ { ind[p] = 1 } /}/ { if (p != "" && !(p in ind)) print p; p = "" }')

# repo_name maps module paths to the repository names go_deps gives them
# (gazelle's label.ImportPathToBazelRepoName): the host's labels reversed,
# then every run of non-word characters replaced by "_".
repo_name() {
  awk '{
    p = tolower($0); n = split(p, c, "/"); m = split(c[1], h, ".")
    s = h[m]; for (i = m - 1; i >= 1; i--) s = s "." h[i]
    for (i = 2; i <= n; i++) s = s "." c[i]
    gsub(/[^0-9a-z_]+/, "_", s); print s
  }'
}

# A directory with its own go.mod (tools/, fixture modules under testdata/)
# is no part of this module: `go build ./...` skips it, so gazelle must too.
# It is excluded by name, not by a pattern such as **/testdata, because an
# excluded testdata directory loses its data = glob(["testdata/**"]).
missing=$(find . -path ./.git -prune -o -name 'bazel-*' -prune -o -name go.mod -type f -print |
  sed -n 's#^\./\(.*\)/go\.mod$#\1#p' | sort | while read -r dir; do
    grep -qxF "# gazelle:exclude $dir" BUILD.bazel || echo "$dir"
  done)
if [ -n "$missing" ]; then
  echo "BUILD.bazel must exclude these nested Go modules from gazelle; add:" >&2
  printf '# gazelle:exclude %s\n' $missing >&2
  exit 1
fi

known=()
for m in $modules; do known+=("-known_import=$m"); done

gazelle=(go tool -modfile=tools/go.mod gazelle update -external=static "${known[@]}")

status=0
if $check; then
  # -mode=diff prints a unified diff and exits 1 when a BUILD file would change.
  if ! "${gazelle[@]}" -mode=diff; then
    echo "BUILD.bazel files are stale: run tools/gazelle.sh" >&2
    status=1
  fi
else
  "${gazelle[@]}" -mode=fix
fi

# The external repositories the BUILD files refer to. Every one must be the
# go_deps repository of a module in go.mod or a bazel_dep of MODULE.bazel.
build_files=$(find . -path ./.git -prune -o -path ./tools -prune -o -name 'bazel-*' -prune -o \
  \( -name BUILD.bazel -o -name BUILD \) -type f -print | sort)
used=$(if [ -n "$build_files" ]; then
  # shellcheck disable=SC2086
  grep -ho '"@[A-Za-z0-9_.+~-]*//' $build_files | sed 's/^"@//; s#//$##' | sort -u
fi)
go_repos=$(printf '%s\n' "$modules" | repo_name | sort -u)
bazel_deps=$(sed -n 's/^bazel_dep(name = "\([^"]*\)".*/\1/p' MODULE.bazel | sort -u)
unknown=$(comm -23 <(printf '%s\n' "$used") <(printf '%s\n%s\n' "$go_repos" "$bazel_deps" | sort -u) | sed '/^$/d')
if [ -n "$unknown" ]; then
  echo "BUILD files refer to repositories that neither go.mod nor MODULE.bazel provide:" >&2
  printf '  @%s\n' $unknown >&2
  status=1
fi
want=$(comm -12 <(printf '%s\n' "$used") <(printf '%s\n' "$go_repos") | sed '/^$/d')

# Rewrite the use_repo(go_deps, ...) block with that list.
new_module=$(mktemp)
trap 'rm -f "$new_module"' EXIT
REPOS="$want" awk '
  /^use_repo\($/ { start = NR }
  NR == start + 1 && $0 == "    go_deps," {
    print; n = split(ENVIRON["REPOS"], r, "\n")
    for (i = 1; i <= n; i++) if (r[i] != "") printf "    \"%s\",\n", r[i]
    skip = 1; next
  }
  skip && /^\)$/ { skip = 0 }
  skip { next }
  { print }
' MODULE.bazel >"$new_module"
if ! grep -q '^    go_deps,$' MODULE.bazel; then
  echo "MODULE.bazel: no use_repo(go_deps, ...) block to update" >&2
  exit 1
fi
if ! cmp -s MODULE.bazel "$new_module"; then
  if $check; then
    diff -u MODULE.bazel "$new_module" | sed "1s#$new_module#MODULE.bazel (wanted)#" || true
    echo "MODULE.bazel use_repo(go_deps, ...) is stale: run tools/gazelle.sh" >&2
    status=1
  else
    cat "$new_module" >MODULE.bazel
  fi
fi

# Bazel warns when use_repo and the direct requirements of go.mod differ
# (`bazel mod tidy` would align them); they agree once go.mod is tidy.
direct_repos=$(printf '%s\n' "$direct" | sed '/^$/d' | repo_name | sort -u)
if [ "$direct_repos" != "$want" ]; then
  echo "note: go_deps use_repo and the direct requirements of go.mod differ (go mod tidy aligns them):" >&2
  diff <(printf '%s\n' "$direct_repos") <(printf '%s\n' "$want") | sed -n 's/^</  direct in go.mod, unused in BUILD files:/p; s/^>/  used in BUILD files, indirect in go.mod:/p' >&2 || true
fi

exit $status
