#!/usr/bin/env bash
# stage.sh NAME CMD...: runs one stage of `make test` and prints how long it took, so a slow or
# failing stage shows in CI's log ("stage NAME: 123 s ok" / "... failed (rc 2)").
set -uo pipefail
name=$1; shift
echo "=== stage $name: started $(date -u +%H:%M:%S)"
t0=$(date +%s)
"$@"; rc=$?
t=$(( $(date +%s) - t0 ))
if [ $rc = 0 ]; then echo "=== stage $name: $t s ok"; else echo "=== stage $name: $t s failed (rc $rc)"; fi
echo "stage $name $t $rc" >>"${STAGE_TIMES:-/dev/null}"
exit $rc
