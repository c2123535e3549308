#!/usr/bin/env bash
# The whole test suite, as README and CI run it: installs and builds (tools/bootstrap.sh), runs
# every meson test (parity tests under mpirun included), then the runtime tests again under
# ThreadSanitizer in a separate build, and prints one "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh || exit 1
meson test -C build --print-errorlogs
rc=$?

# ThreadSanitizer: the actor runtime's threads, streams and back pressure.
tsan=0
if [ -f build-tsan/build.ninja ] || meson setup build-tsan -Db_sanitize=thread -Dcuda=disabled -Dbuildtype=debugoptimized >/dev/null; then
  if ninja -C build-tsan tests/runtime_test >/dev/null && TSAN_OPTIONS=halt_on_error=1 ./build-tsan/tests/runtime_test; then
    tsan=1
  fi
fi
[ $tsan = 1 ] || rc=1

python3 - "$tsan" <<'PY'
import json, sys
rows = [json.loads(l) for l in open("build/meson-logs/testlog.json")]
ok = sum(r["result"] == "OK" for r in rows) + int(sys.argv[1])
print(f"{ok} passed, {len(rows) + 1 - ok} failed")
PY
exit $rc
