#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (docs/testing.md), each for SECONDS (default 60), from its
# seed corpus in fuzz/corpus/TARGET; with no TARGET given, every target. Builds them first
# in build-fuzz/ with clang, ASan and UBSan. New inputs go to build-fuzz/corpus/TARGET (kept, so
# long runs build on each other) and crashes to build-fuzz/findings/TARGET/; exits 1 on a finding.
# Targets run side by side, one per core (FUZZ_JOBS to change it).
#   bash tools/fuzz.sh                 # 60 s each, as CI runs them
#   bash tools/fuzz.sh 3600 onnx       # an hour on the ONNX importer
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
if [ ! -f build-fuzz/build.ninja ]; then
  CXX=clang++ CC=clang meson setup build-fuzz -Dfuzz=true -Dcuda=disabled -Dwerror=false -Dbuildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dcpp_args=-fno-sanitize-recover=all >/dev/null || exit 1
fi
targets=("$@")
if ((${#targets[@]} == 0)); then
  for d in fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
ninja -C build-fuzz $(printf 'fuzz/fuzz_%s ' "${targets[@]}") >/dev/null || { ninja -C build-fuzz; exit 1; }
# One target per core at a time: each still gets a core for SECONDS, in a fraction of the wall time.
jobs=${FUZZ_JOBS:-$(nproc)}
fuzz_one() {
  local t=$1 dict=()
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/findings/$t"
  rm -f "build-fuzz/findings/$t.code"
  # detect_leaks: a leak is a finding too. The log keeps libFuzzer's final stats for the summary.
  [ -f "fuzz/$t.dict" ] && dict=("-dict=fuzz/$t.dict")
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "build-fuzz/fuzz/fuzz_$t" "${dict[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/findings/$t/" "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"build-fuzz/findings/$t.log" 2>&1
  echo $? >"build-fuzz/findings/$t.code"
}
for t in "${targets[@]}"; do
  echo "fuzz: $t for ${seconds} s"
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  fuzz_one "$t" &
done
wait
rc=0
for t in "${targets[@]}"; do
  code=$(cat "build-fuzz/findings/$t.code" 2>/dev/null || echo 1)
  echo "fuzz: $t:"
  grep -E "^stat::number_of_executed_units|^Done|DONE" "build-fuzz/findings/$t.log" | tail -2
  if [ "$code" -ne 0 ]; then
    echo "fuzz: $t found a failure (exit $code); the input is in build-fuzz/findings/$t/:"
    grep -E "ERROR|runtime error|SUMMARY|Test unit written" "build-fuzz/findings/$t.log" | head -10
    rc=1
  fi
done
exit $rc
