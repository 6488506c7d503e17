#!/usr/bin/env bash
# A scripted session with the CLI at injected times (MNEMOD_NOW): every engine behaviour in
# one run, on a throw-away data folder. Usage: examples/cli-session.sh [mnemod-binary]
set -euo pipefail
M=${1:-$(command -v mnemod || echo .venv/bin/mnemod)}
export MNEMOD_DATA_DIR=$(mktemp -d)/data
at() { export MNEMOD_NOW="$1"; }
say() { printf '\n== %s\n' "$*"; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)[\"$1\"])"; }

at 2026-03-01T09:00:00Z
say "TTL per type × importance (from 2026-03-01)"
for type in context preference progress relation insight; do
  for imp in 1 3 5; do
    e=$($M add "ttl probe $type $imp $RANDOM$RANDOM" --type "$type" --importance "$imp" --json)
    printf '%-10s importance %s → expires %s\n' "$type" "$imp" "$(echo "$e" | field expires_at)"
  done
done

say "each access adds 7 days, up to 90 days in all"
id=$($M add "Project codename is Falcon" --type context --json | field id)
for n in 1 2 11 12; do
  while [ "$($M get "$id" --json | field access_count)" -lt "$n" ]; do $M access "$id" >/dev/null; done
  echo "after $n accesses: expires $($M get "$id" --json | field expires_at)"
done

say "dedup on add: the second add updates the first"
$M add "User likes TypeScript" --type context
$M add "User likes TypeScript a lot" --type context
ts=$($M get "$($M list --json | python3 -c 'import json,sys; print([e["id"] for e in json.load(sys.stdin) if "TypeScript" in e["content"]][0])')" --json)
echo "$ts" | python3 -c 'import json,sys; e=json.load(sys.stdin); print("one entry:", e["id"], repr(e["content"]), "merged_from", e["merged_from"])'

say "history of the merged entry"
$M history "$(echo "$ts" | field id)"

say "GC moves expired entries to the archive with a reason (progress: 7 days)"
$M add "Sprint 12 is half done" --type progress >/dev/null
at 2026-03-09T09:00:00Z
$M gc --dry-run
$M gc
grep '"Sprint 12 is half done"' "$MNEMOD_DATA_DIR/default/l3/archive.jsonl" | tail -n 1 | python3 -c 'import json,sys; r=json.load(sys.stdin); print("archived:", r["entry"]["content"], "|", r["reason"])'

say "a non-chaining merge: A~C and B~C pass 0.5, A~B does not → one merge, not a chain"
export MNEMOD_DEDUP_THRESHOLD=0.95   # (a separate namespace, so nothing else takes part)
$M add "alpha" -n chain --keyword w1 --keyword w2 --keyword w3 --keyword a1 --keyword a2
$M add "beta" -n chain --keyword w1 --keyword w2 --keyword w3 --keyword b1 --keyword b2
$M add "gamma" -n chain --keyword w1 --keyword w2 --keyword w3 --keyword a1 --keyword b1
export MNEMOD_DEDUP_THRESHOLD=0.5
$M gc -n chain
$M list -n chain

say "promotion to L2 and back through get"
p=$($M add "Prod DB is postgres 16 on db1" --type relation --json | field id)
for n in 1 2 3; do $M access "$p" >/dev/null; done
$M promote "$p"
$M get "$p" | grep -E '^(layer|expires_at|content)'
cat "$MNEMOD_DATA_DIR/default/l2/relation.md"

say "a corrupted index.json is refused, never overwritten"
printf '{"format": "mnemod.l3/1", "entries": [' > "$MNEMOD_DATA_DIR/default/l3/index.json"
rm -f "$MNEMOD_DATA_DIR/default/l3/index.json.bak"
set +e; $M add "after the damage"; code=$?; set -e
echo "exit code $code; file still: $(cat "$MNEMOD_DATA_DIR/default/l3/index.json")"
