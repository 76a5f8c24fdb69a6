#!/usr/bin/env bash
# Builds webhookd's release binaries, fully static (musl), into dist/, writes dist/SHA256SUMS,
# and smoke-runs each binary (under qemu-user where it is not native).
#
#   scripts/release.sh                               # all three targets
#   scripts/release.sh aarch64-unknown-linux-musl    # only the ones named
#
# Targets: x86_64-unknown-linux-musl, aarch64-unknown-linux-musl,
# armv7-unknown-linux-musleabihf. From a fresh Debian machine it installs what it needs:
# Debian packages (qemu-user, musl-tools, libc6-armhf-cross), zig from PyPI (`ziglang`),
# `cargo-zigbuild` from crates.io, rustup targets, and for armv7 a nightly toolchain with
# `rust-src` (rustup offers no prebuilt armv7 musl std here, so std is built from source).
# Where that cannot be had, armv7 falls back to a build needing only glibc >= 2.17
# (dist/webhookd-armv7-unknown-linux-gnueabihf), and the script says so.
#
# Why zig: the bundled SQLite is C; Debian's cross gcc compiles it against glibc headers,
# which fails to link under musl (open64, pread64, ...). zig ships musl headers and libc for
# every target. Details: docs/dev/release.md.
#
# Env: SKIP_INSTALL=1 (use the tools already here), SKIP_SMOKE=1 (build only),
# SKIP_BUILD=1 (check and smoke-run the binaries already in dist/).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST=$ROOT/dist
ALL_TARGETS=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl armv7-unknown-linux-musleabihf)
export CARGO_TERM_COLOR=never

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'release.sh: %s\n' "$*" >&2; exit 1; }

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=("${ALL_TARGETS[@]}"); fi
for t in "${targets[@]}"; do
    case " ${ALL_TARGETS[*]} " in
        *" $t "*) ;;
        *) die "unknown target '$t' (one of: ${ALL_TARGETS[*]})" ;;
    esac
done

needs() { # needs TARGET: whether TARGET was asked for
    case " ${targets[*]} " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}

# ---------------------------------------------------------------- installs
apt_updated=0
apt_install() { # apt_install PKG...: installs the Debian packages not yet installed
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "missing Debian packages ${missing[*]} and no apt-get"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    if [ $apt_updated -eq 0 ]; then
        $sudo apt-get update -qq
        apt_updated=1
    fi
    say "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

zig_ok() { command -v zig >/dev/null || python3 -c 'import ziglang' 2>/dev/null; }

install_tools() {
    local pkgs=(musl-tools binutils)
    for t in "${targets[@]}"; do
        [ "$t" != x86_64-unknown-linux-musl ] && pkgs+=(qemu-user)
        # Only the glibc fallback of armv7 needs Debian's armhf libc, for qemu-arm -L.
        [ "$t" = armv7-unknown-linux-musleabihf ] && pkgs+=(libc6-armhf-cross)
    done
    apt_install "${pkgs[@]}"
    if ! zig_ok; then
        say "pip install ziglang (zig, the cross C compiler and linker)"
        python3 -m pip install --quiet ziglang || pip3 install --quiet ziglang
    fi
    zig_ok || die "zig is not available (pip install ziglang)"
    if ! command -v cargo-zigbuild >/dev/null; then
        say "cargo install cargo-zigbuild"
        cargo install --locked --quiet cargo-zigbuild
    fi
    for t in "${targets[@]}"; do
        [ "$t" = armv7-unknown-linux-musleabihf ] && continue
        rustup target list --installed | grep -qx "$t" || { say "rustup target add $t"; rustup target add "$t"; }
    done
}

# armv7 musl: prebuilt std if rustup has one, else nightly + rust-src (-Zbuild-std), else
# the glibc 2.17 fallback. Sets ARMV7_MODE to prebuilt | build-std | glibc.
armv7_mode() {
    local t=armv7-unknown-linux-musleabihf
    if rustup target list --installed | grep -qx "$t" || rustup target add "$t" >/dev/null 2>&1; then
        ARMV7_MODE=prebuilt; return
    fi
    say "rustup has no prebuilt std for $t here; trying nightly + rust-src (-Zbuild-std)"
    if { rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal; } &&
        rustup component add rust-src --toolchain nightly >/dev/null 2>&1; then
        ARMV7_MODE=build-std; return
    fi
    say "no nightly rust-src either: falling back to armv7-unknown-linux-gnueabihf (glibc >= 2.17)"
    rustup target add armv7-unknown-linux-gnueabihf || die "cannot add armv7-unknown-linux-gnueabihf either"
    ARMV7_MODE=glibc
}

# ---------------------------------------------------------------- builds
# build TARGET: builds and copies the binary to dist/; sets OUT to its path.
build() {
    local t=$1 out src start
    start=$(date +%s)
    case "$t" in
        armv7-unknown-linux-musleabihf)
            armv7_mode
            case "$ARMV7_MODE" in
                prebuilt)
                    cargo zigbuild --release --locked --target "$t" >&2
                    src=target/$t/release/webhookd; out=$DIST/webhookd-$t ;;
                build-std)
                    # link-self-contained=no: zig provides crt1.o and libc; rustc's own copies
                    # are missing from a std built from source.
                    RUSTFLAGS="-C link-self-contained=no" cargo +nightly zigbuild --release --locked \
                        -Zbuild-std=std,panic_abort --target "$t" >&2
                    src=target/$t/release/webhookd; out=$DIST/webhookd-$t ;;
                glibc)
                    cargo zigbuild --release --locked --target armv7-unknown-linux-gnueabihf.2.17 >&2
                    src=target/armv7-unknown-linux-gnueabihf/release/webhookd
                    out=$DIST/webhookd-armv7-unknown-linux-gnueabihf ;;
            esac ;;
        *)
            cargo zigbuild --release --locked --target "$t" >&2
            src=target/$t/release/webhookd; out=$DIST/webhookd-$t ;;
    esac
    mkdir -p "$DIST"
    cp "$src" "$out"
    chmod 0755 "$out"
    BUILD_SECS[$t]=$(( $(date +%s) - start ))
    OUT=$out
}

# is_static FILE: no program interpreter and no shared-library dependency.
is_static() {
    ! readelf -lW "$1" | grep -q 'Requesting program interpreter' &&
        ! readelf -dW "$1" 2>/dev/null | grep -q '(NEEDED)'
}

# ---------------------------------------------------------------- smoke run
# runner FILE: the command prefix that runs FILE on this machine.
runner() {
    local f=$1 machine
    machine=$(readelf -hW "$f" | awk -F: '/Machine:/ {gsub(/^ +/, "", $2); print $2}')
    case "$machine" in
        "Advanced Micro Devices X86-64") [ "$(uname -m)" = x86_64 ] && { echo ""; return; }; echo "qemu-x86_64" ;;
        AArch64) [ "$(uname -m)" = aarch64 ] && { echo ""; return; }; echo "qemu-aarch64" ;;
        ARM)
            if is_static "$f"; then echo "qemu-arm"; else echo "qemu-arm -L /usr/arm-linux-gnueabihf"; fi ;;
        *) die "cannot run a $machine binary here" ;;
    esac
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

json_get() { # json_get EXPR < JSON: prints the value of a Python expression over `d`
    python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"
}

# smoke FILE: --version, serve on a temp file, /healthz, one signed request, one delivery to
# a loopback receiver. Every command runs the release binary itself (through qemu if needed).
smoke() {
    local f=$1 run tmp port rport key_id secret pids=() status version
    run=$(runner "$f")
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "kill \$(jobs -p) 2>/dev/null; rm -rf '$tmp'" RETURN
    version=$($run "$f" --version)
    say "smoke $(basename "$f"): $version"
    local want="^webhookd [0-9]+\\.[0-9]+\\.[0-9]+[^ ]* \\(([0-9a-f]{7,}|unknown), ${t_of[$f]}\\)\$"
    [[ "$version" =~ $want ]] || die "bad --version: '$version' (want $want)"

    # A loopback receiver that answers 204 and writes each body it gets to a file.
    rport=$(free_port)
    python3 - "$rport" "$tmp/received" <<'PY' &
import http.server, sys
port, out = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(out, "ab") as f:
            f.write(body + b"\n")
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
PY
    port=$(free_port)
    $run "$f" serve --db "$tmp/smoke.sqlite" --listen "127.0.0.1:$port" 2>"$tmp/serve.log" &
    export WEBHOOKD_URL=http://127.0.0.1:$port
    local i
    for i in $(seq 1 150); do
        $run "$f" healthcheck >/dev/null 2>&1 && break
        sleep 0.2
    done
    $run "$f" healthcheck || { cat "$tmp/serve.log" >&2; die "$(basename "$f"): /healthz did not answer 200"; }
    key_id=$(awk '/key id:/ {print $3}' "$tmp/serve.log")
    secret=$(awk '/secret:/ {print $2}' "$tmp/serve.log")
    [ -n "$key_id" ] && [ -n "$secret" ] || { cat "$tmp/serve.log" >&2; die "no first-start key printed"; }
    export WEBHOOKD_KEY_ID=$key_id WEBHOOKD_SECRET=$secret
    $run "$f" api POST /v1/endpoints "{\"name\":\"smoke\",\"url\":\"http://127.0.0.1:$rport/hook\"}" >"$tmp/ep.json" ||
        { cat "$tmp/ep.json" >&2; die "signed POST /v1/endpoints failed"; }
    local ep_id task_id
    ep_id=$(json_get 'd["data"]["id"]' <"$tmp/ep.json")
    $run "$f" api POST /v1/tasks "{\"endpoint_id\":$ep_id,\"payload\":{\"smoke\":\"$(basename "$f")\"}}" >"$tmp/task.json" ||
        { cat "$tmp/task.json" >&2; die "signed POST /v1/tasks failed"; }
    task_id=$(json_get 'd["data"]["id"]' <"$tmp/task.json")
    for i in $(seq 1 150); do
        status=$($run "$f" api GET "/v1/tasks/$task_id" | json_get 'd["data"]["status"]')
        [ "$status" = success ] && break
        sleep 0.2
    done
    [ "$status" = success ] || { cat "$tmp/serve.log" >&2; die "task $task_id ended $status, not success"; }
    grep -q "\"smoke\":\"$(basename "$f")\"" "$tmp/received" || die "the receiver did not get the payload"
    unset WEBHOOKD_URL WEBHOOKD_KEY_ID WEBHOOKD_SECRET
    say "smoke $(basename "$f"): --version, serve, /healthz, signed request, delivery: ok${run:+ (under $run)}"
}

# ---------------------------------------------------------------- main
declare -A BUILD_SECS t_of
[ "${SKIP_INSTALL:-}" = 1 ] || install_tools
made=()
for t in "${targets[@]}"; do
    say "build $t"
    ARMV7_MODE=""
    if [ "${SKIP_BUILD:-}" = 1 ]; then
        OUT=$DIST/webhookd-$t BUILD_SECS[$t]=0
        if [ "$t" = armv7-unknown-linux-musleabihf ] && [ ! -e "$OUT" ]; then
            OUT=$DIST/webhookd-armv7-unknown-linux-gnueabihf ARMV7_MODE=glibc
        fi
        [ -e "$OUT" ] || die "SKIP_BUILD=1 but $OUT is missing"
    else
        build "$t"
    fi
    is_static "$OUT" || [ "$ARMV7_MODE" = glibc ] || die "$OUT is not statically linked"
    made+=("$OUT")
    t_of[$OUT]=${OUT##*/webhookd-}
done
(cd "$DIST" && sha256sum webhookd-* >SHA256SUMS)
if [ "${SKIP_SMOKE:-}" != 1 ]; then
    for f in "${made[@]}"; do smoke "$f"; done
fi

echo
echo "release binaries (dist/):"
for i in "${!made[@]}"; do
    f=${made[$i]} t=${targets[$i]}
    kind="static (musl)"
    if ! is_static "$f"; then kind="dynamic, needs glibc >= 2.17 (armv7 musl std not available)"; fi
    printf '  %-48s %6.1f MB  %4ss build  %s\n' "$(basename "$f")" \
        "$(awk -v b="$(stat -c %s "$f")" 'BEGIN {print b / 1e6}')" "${BUILD_SECS[$t]}" "$kind"
done
echo "  SHA256SUMS"
