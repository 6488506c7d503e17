#!/usr/bin/env bash
# mnemod from the shell with redis-cli: add a memory, access it, resolve over RPC, read hot items.
#
#   REDIS_URL=unix:///path/to/.mnemod/redis/redis.sock examples/redis-cli.sh
#
# REDIS_URL is what `mnemod run` prints (or redis://[user:pass@]host:port/db for a shared
# Redis); MNEMOD_NAMESPACE defaults to "default".
set -euo pipefail

url="${REDIS_URL:-redis://localhost:6379/0}"
ns="${MNEMOD_NAMESPACE:-default}"
case "$url" in
  unix://*) r() { redis-cli -s "${url#unix://}" "$@"; } ;;
  *) r() { redis-cli --no-auth-warning -u "$url" "$@"; } ;;
esac
base="mnemod:{$ns}"   # every key of a namespace starts like this

# 1. Add a memory: an event on the events stream (only "content" is required).
r XADD "$base:events" '*' op add data \
  '{"content":"The user prefers metric units and the Asia/Taipei timezone.","type":"preference","importance":4,"key":"user.prefs"}'

# The daemon applies events in the background; wait until the key label points at an id.
for _ in $(seq 100); do
  id=$(r GET "$base:key:user.prefs")
  [ -n "$id" ] && break
  sleep 0.1
done
[ -n "$id" ] || { echo "mnemod did not apply the add: is it running? see $base:dead" >&2; exit 1; }
echo "stored as $id"

# 2. Access it (by id or key label): extends its life, counts towards promotion.
r XADD "$base:events" '*' op access data '{"id":"user.prefs"}' >/dev/null

# 3. Resolve over RPC: the answer (JSON) is pushed to a list we name, outside mnemod's keys.
reply="example-reply:$$-$RANDOM$RANDOM"
r XADD "$base:rpc" '*' op resolve prompt 'Which timezone and units does the user prefer?' \
  budget 500 session example reply_to "$reply" >/dev/null
answer=$(r BLPOP "$reply" 10 | tail -n 1)   # BLPOP prints the list name, then the value
[ -n "$answer" ] || { echo "no answer from mnemod within 10 s" >&2; exit 1; }
case "$answer" in *'"ok":false'*) echo "mnemod refused the request: $answer" >&2; exit 1 ;; esac
echo "$answer"                              # pipe through `jq -r .text` for the text alone

# 4. Read hot items: the five most retained L3 entries, then one item by id.
for hot_id in $(r ZREVRANGE "$base:hot" 0 4); do
  echo "hot: $hot_id $(r HGET "$base:m:$hot_id" content)"
done
r HGETALL "$base:m:$id"
