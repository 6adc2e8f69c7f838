#!/usr/bin/env bash
# Chart benchmarks (not tests): prints figures, asserts nothing.
#  1. Resolve one chart from each index in ../shared/data/indexes with
#     kube-aws and with real Helm (helm-python-sdk repo_index + pick, the
#     index-loading part of `helm pull`), both against the same index served
#     on 127.0.0.1: wall time, peak RSS, ratios.
#  2. Fetch 20 charts from a 127.0.0.1 server that delays every response by
#     100 ms: cold wall time vs one chart, and requests on a warm run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${KUBE_AWS_TOOLS:-$ROOT/.venv-tools/bin}/python
DATA=${KUBE_AWS_SHARED_DATA:-$ROOT/../shared/data}
[ -x "$PY" ] || { echo "bench: $PY missing; run make tools" >&2; exit 1; }
[ -d "$DATA/indexes" ] || { echo "bench: $DATA/indexes missing; set KUBE_AWS_SHARED_DATA" >&2; exit 1; }

cargo build --release --quiet
BIN=$ROOT/target/release/kube-aws
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do "$PY" -c "import socket; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null && return; sleep 0.1; done; echo "bench: port $1 not ready" >&2; exit 1; }

# ---- 1. one chart from each index -------------------------------------------
mkdir -p "$WORK/repos"
for f in "$DATA"/indexes/*.index.yaml; do
  n=$(basename "$f" .index.yaml)
  mkdir -p "$WORK/repos/$n"
  ln -s "$f" "$WORK/repos/$n/index.yaml"
done
PORT=$(free_port)
"$PY" -m http.server --bind 127.0.0.1 "$PORT" --directory "$WORK/repos" >/dev/null 2>&1 &
PIDS+=($!)
wait_port "$PORT"

# The chart looked up: the last chart key in the file (the worst case for a scan).
last_chart() { grep -E '^  [A-Za-z0-9][^ :]*:$' "$1" | tail -1 | sed -e 's/^  //' -e 's/:$//'; }

measure() { # prints "seconds maxrss_kb" of a command
  /usr/bin/time -f '%e %M' -o "$WORK/time" "$@" >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; return 1; }
  cat "$WORK/time"
}

printf '%-42s %8s %-22s %9s %9s %9s %9s %8s %8s\n' index MB chart ka_s ka_MB helm_s helm_MB speedup rss/size
for f in "$DATA"/indexes/*.index.yaml; do
  n=$(basename "$f" .index.yaml)
  chart=$(last_chart "$f")
  url="http://127.0.0.1:$PORT/$n"
  read -r ka_s ka_kb < <(measure "$BIN" charts resolve "$chart" --repo "$url" -o json)
  read -r h_s h_kb < <(measure "$PY" -c '
import sys, helm_python as h
idx = h.repo_index(sys.argv[1])
vs = idx["entries"][sys.argv[2]]
print(vs[0]["version"])' "$url" "$chart")
  size=$(stat -c %s "$f")
  awk -v n="$n" -v size="$size" -v c="$chart" -v ks="$ka_s" -v kk="$ka_kb" -v hs="$h_s" -v hk="$h_kb" 'BEGIN {
    ks1 = (ks < 0.005 ? 0.005 : ks);
    printf "%-42s %8.2f %-22s %9.3f %9.1f %9.3f %9.1f %7.1fx %8.2f\n", n, size/1e6, c, ks, kk/1024, hs, hk/1024, hs/ks1, kk*1024/size }'
done
echo "(ka = kube-aws charts resolve --repo URL; helm = helm-python-sdk repo_index; /usr/bin/time, seconds with 10 ms resolution)"

# ---- 2. 20 charts behind a 100 ms delay --------------------------------------
REPO=$WORK/slow
mkdir -p "$REPO"
"$PY" - "$REPO" <<'PYEOF'
import os, sys, tempfile, helm_python as h
out = sys.argv[1]
with tempfile.TemporaryDirectory() as w:
    h.Chart.create("app", w)
    for i in range(1, 21):
        h.package(os.path.join(w, "app"), destination=out, version=f"0.0.{i}")
h.repo_index_generate(out)
PYEOF
SPORT=$(free_port)
"$PY" - "$REPO" "$SPORT" >/dev/null 2>&1 <<'PYEOF' &
import functools, http.server, sys, time
class H(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        time.sleep(0.1)
        super().do_GET()
    def log_message(self, *a): pass
# A listen backlog of 5 (the default) drops simultaneous connects and costs a 1 s SYN retry.
http.server.ThreadingHTTPServer.request_queue_size = 128
srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), functools.partial(H, directory=sys.argv[1]))
srv.serve_forever()
PYEOF
PIDS+=($!)
wait_port "$SPORT"

worktree() { # dir count
  mkdir -p "$1"
  { printf 'clusterName: bench\nregion: us-west-2\ns3URI: s3://my-bucket/p\ncharts:\n'
    for i in $(seq 1 "$2"); do printf "  - {name: app%s, chart: app, repo: 'http://127.0.0.1:%s', version: 0.0.%s}\n" "$i" "$SPORT" "$i"; done
  } >"$1/cluster.yaml"
  XDG_CACHE_HOME=$WORK/lockcache "$BIN" --dir "$1" charts lock >/dev/null
}
fetch_time() { # dir cache [args] -> "seconds requests"
  local dir=$1 cache=$2; shift 2
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$(XDG_CACHE_HOME=$cache "$BIN" --dir "$dir" -o json charts fetch "$@")
  t1=$(date +%s.%N)
  echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}') $(echo "$out" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["requests"])')"
}
worktree "$WORK/one" 1
worktree "$WORK/twenty" 20
read -r one_s one_r < <(fetch_time "$WORK/one" "$WORK/c1")
read -r d8_s d8_r < <(fetch_time "$WORK/twenty" "$WORK/c8")
read -r d20_s d20_r < <(fetch_time "$WORK/twenty" "$WORK/c20" --concurrency 20)
read -r warm_s warm_r < <(fetch_time "$WORK/twenty" "$WORK/c20" --concurrency 20)
echo
echo "20 charts, server delays each response 100 ms:"
printf '  one chart, cold:                 %6.3f s  %s request(s)\n' "$one_s" "$one_r"
printf '  20 charts, cold, concurrency 8:  %6.3f s  %s request(s)  (%.2fx one chart)\n' "$d8_s" "$d8_r" "$(awk -v a="$d8_s" -v b="$one_s" 'BEGIN{print a/b}')"
printf '  20 charts, cold, concurrency 20: %6.3f s  %s request(s)  (%.2fx one chart)\n' "$d20_s" "$d20_r" "$(awk -v a="$d20_s" -v b="$one_s" 'BEGIN{print a/b}')"
printf '  20 charts, warm:                 %6.3f s  %s request(s)\n' "$warm_s" "$warm_r"
