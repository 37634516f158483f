#!/usr/bin/env bash
# The demo: a task whose plugin is SIGKILLed mid-step shows as interrupted,
# and an explicit resume completes the same task id.
set -euo pipefail
bin=$(cd "$(dirname "$0")/../bin" && pwd)
data=$(mktemp -d /tmp/taskhost-demo.XXXXXX)
trap 'rm -rf "$data"' EXIT
pidfile=$data/plugin.pid
cat > "$data/spec.json" <<JSON
{"goal": "count to three, surviving a crash",
 "testexec": {"steps": 3, "sleep_ms": 200, "pid_file": "$pidfile", "sleep_at_attempt": 2, "long_sleep_ms": 60000}}
JSON

echo "== taskhost run: a 3-step task; its plugin is SIGKILLed during step 2"
"$bin/taskhost" run --data-dir "$data/store" --executor testexec --spec-file "$data/spec.json" > "$data/run.out" &
run=$!
for _ in $(seq 1 200); do
  grep -q 'attempt=2' "$data/run.out" 2>/dev/null && break
  sleep 0.05
done
kill -KILL "$(cat "$pidfile")"
set +e; wait "$run"; code=$?; set -e
cat "$data/run.out"
echo "(exit code $code: 6 means interrupted)"
id=$(awk 'NR==1{print $2}' "$data/run.out")

echo
echo "== taskhost run --resume $id"
"$bin/taskhost" run --data-dir "$data/store" --resume "$id"

echo
echo "== taskhost inspect $id"
"$bin/taskhost" inspect --data-dir "$data/store" "$id"
