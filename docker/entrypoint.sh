#!/bin/sh
# The image's entry point. Before `mnemod run` it checks that the data folder is writable by
# the user the container runs as: a host folder bind-mounted on /data with another owner
# then ends in one line and exit code 2, not a traceback. Any command is then exec'd, so it
# runs as PID 1 and receives `docker stop`'s SIGTERM itself.
set -eu

if [ "${1:-}" = mnemod ] && [ "${2:-}" = run ]; then
  data=${MNEMOD_DATA_DIR:-/data}
  if [ -d "$data" ] && { [ ! -w "$data" ] || [ ! -x "$data" ]; }; then
    uid=$(id -u)
    owner=$(stat -c %u "$data" 2>/dev/null || echo "?")
    echo "mnemod: cannot write data folder $data (owned by uid $owner, mnemod runs as uid" \
      "$uid): chown -R $uid:$uid the host folder, or mount a named volume there" >&2
    exit 2
  fi
fi
exec "$@"
