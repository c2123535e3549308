#!/usr/bin/env bash
# Packs what a bare GPU machine lacks to run flowrun into .bundle/ (ignored through
# .git/info/exclude), for tools/gpu_check.sh (issue 30, "A GPU to test on").
#
#     bash tools/gpu_bundle.sh            # after tools/bootstrap.sh (the dependencies, nvcc)
#
# It builds flowrun, its CUDA module and the tests the check runs in build-bundle/, with CUDA and
# for x86-64-v3 (-Dmarch=x86-64-v3: AVX2, FMA, BMI2), not this machine's CPU: the GPU machine's
# may lack what -march=native uses here (AVX-512 VBMI), and would stop on the first such
# instruction.
#
# The GPU machine has PyTorch, nvcc and CUDA's libraries but none of flowrun's Debian dependencies
# (yaml-cpp, ONNX, protobuf, oneDNN, Open MPI) and no network. This script copies, from this
# machine:
#   - flowrun as bin/flowrun, and every shared library `ldd` lists for it that is not part of glibc
#     (libdnnl, libonnx_proto, libprotobuf, libyaml-cpp, libmpi, libopen-rte, libopen-pal, libhwloc,
#     libevent, libudev, libgomp, libOpenCL, libz, ...) into lib/; libstdc++ and libgcc_s go to
#     lib/compat/, which env.sh uses only when the machine's own are missing or too old (PyTorch's
#     machine has newer ones, and an older libstdc++ ahead of them would break nothing of ours but
#     could break tools started from the same shell);
#   - Open MPI's launcher (orterun as mpirun and mpiexec, orted, ompi_info), its MCA plugins except
#     those for fabrics a one-node run never uses (UCX, libfabric, verbs, PSM, OpenSHMEM), with
#     their libraries, its help files and openmpi-mca-params.conf, laid out under ompi/ so that
#     OPAL_PREFIX (and the OPAL_*DIR variables env.sh sets) relocate it; PMIx's plugins and help
#     files under pmix/ (PMIX_PREFIX).
# The tree is packed as .bundle/flowrun-bundle.tar.xz (oneDNN alone is 38 MiB unpacked; the whole
# working tree that travels to the GPU machine is capped at 64 MiB), next to .bundle/env.sh and
# .bundle/MANIFEST.txt. `source .bundle/env.sh` unpacks the archive on first use into
# $FLOWRUN_BUNDLE_ROOT (default /tmp/flowrun-bundle) and sets PATH, LD_LIBRARY_PATH, OPAL_PREFIX
# and friends. configs/, models/ and data/ are tracked, so they travel with the tree and are not
# bundled.
#
# Afterwards the script checks the bundle here, in a clean environment (env -i): every library
# flowrun, mpirun and the plugins need resolves inside the bundle or to glibc, `flowrun --version`
# runs, and `mpirun -n 2` runs flowrun with the bundled Open MPI. Where it may (root, unshare),
# it hides this machine's Open MPI, PMIx and oneDNN directories while doing so, so that nothing
# is found there by accident. FLOWRUN_BUNDLE_NOCHECK=1 skips the check.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

bdir=build-bundle
if [ ! -f "$bdir/build.ninja" ]; then
  meson setup "$bdir" -Dcuda=enabled -Dmarch=x86-64-v3 >/dev/null || { echo "gpu_bundle: meson setup $bdir failed" >&2; exit 2; }
fi
# Meson 1.0 does not track nvcc's header dependencies: rebuild the CUDA objects after a header.
if [ -f "$bdir/src/libflowrun_cuda.so" ] &&
   [ -n "$(find src \( -name '*.h' -o -name '*.cuh' \) -newer "$bdir/src/libflowrun_cuda.so" | head -1)" ]; then
  touch src/ops/cuda/*.cu
fi
ninja -C "$bdir" src/flowrun src/libflowrun_cuda.so tests/device_ops_test tests/nccl_test tests/parity_test >/dev/null ||
  { echo "gpu_bundle: building in $bdir failed (ninja -C $bdir for the errors)" >&2; exit 2; }
bin=$bdir/src/flowrun
for t in ldd xz tar; do
  command -v "$t" >/dev/null || { echo "gpu_bundle: needs $t" >&2; exit 2; }
done

out=$repo/.bundle
exclude=$(git rev-parse --git-path info/exclude)
grep -qxF '/.bundle/' "$exclude" 2>/dev/null || { mkdir -p "$(dirname "$exclude")"; echo '/.bundle/' >>"$exclude"; }

stage=$(mktemp -d "${TMPDIR:-/tmp}/flowrun-bundle-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root"/{bin,lib/compat,ompi/bin,ompi/lib,ompi/share,ompi/etc,pmix/lib/pmix,pmix/share}

# --- Where this machine's Open MPI and PMIx live -----------------------------------------------
ompi_path() { ompi_info --path all 2>/dev/null | awk -v k="$1:" '$1 == k { print $2; exit }'; }
ompi_libdir=$(ompi_path Libdir); ompi_pkglibdir=$(ompi_path Pkglibdir)
ompi_pkgdatadir=$(ompi_path Pkgdatadir); ompi_sysconfdir=$(ompi_path Sysconfdir)
: "${ompi_libdir:=/usr/lib/x86_64-linux-gnu/openmpi/lib}"
: "${ompi_pkglibdir:=$ompi_libdir/openmpi3}"
: "${ompi_pkgdatadir:=/usr/share/openmpi}"
: "${ompi_sysconfdir:=/etc/openmpi}"
orterun=$(readlink -f "$(command -v mpirun)")
orted=$(command -v orted || true)
pmix_pkglibdir=$(ls -d /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix 2>/dev/null || true)
pmix_datadir=$(ls -d /usr/lib/x86_64-linux-gnu/pmix2/share/pmix 2>/dev/null || true)

# --- Libraries ---------------------------------------------------------------------------------
# glibc's own libraries stay the machine's: they must match its dynamic loader.
is_base() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*|libresolv.so*|libanl.so*|libmvec.so*) return 0 ;;
  esac
  return 1
}
# CUDA's libraries stay the GPU machine's (cuBLAS alone is 600 MB): env.sh finds them there.
is_cuda() {
  case "$1" in libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*|libcudnn*|libcuda.so*|libnvJitLink.so*) return 0 ;; esac
  return 1
}
is_compat() { case "$1" in libstdc++.so*|libgcc_s.so*) return 0 ;; esac; return 1; }
# Fabric libraries: a plugin that needs one is left out (a one-node run uses shared memory).
is_fabric() {
  case "$1" in
    libucp.so*|libucs.so*|libuct.so*|libucm.so*|libfabric.so*|libibverbs.so*|librdmacm.so*|libpsm*|libinfinipath.so*|libefa.so*|libnl-*|liboshmem.so*|libmca_common_ucx.so*|libmca_common_ofi.so*|libmca_common_verbs.so*) return 0 ;;
  esac
  return 1
}

# needs FILE: "soname path" for each library ldd resolves; fails on one it cannot find.
needs() {
  ldd "$1" | awk '
    /=> not found/ { print "MISSING " $1; next }
    $2 == "=>" && $3 ~ /^\// { print $1, $3 }'
}

copy_lib() {  # soname path
  local dest=$root/lib
  is_compat "$1" && dest=$root/lib/compat
  [ -e "$dest/$1" ] || cp -L "$2" "$dest/$1"
}

# add_deps FILE: copies FILE's non-glibc libraries into lib/ (lib/compat/).
add_deps() {
  local name path
  while read -r name path; do
    [ "$name" = MISSING ] && { echo "gpu_bundle: $1 needs $path, which ldd cannot find here" >&2; exit 1; }
    is_base "$name" || is_cuda "$name" || copy_lib "$name" "$path"
  done < <(needs "$1")
}

# plugin_ok FILE: no fabric library and nothing missing among FILE's libraries.
plugin_ok() {
  local name path
  while read -r name path; do
    [ "$name" = MISSING ] && return 1
    is_fabric "$name" && return 1
  done < <(needs "$1")
  return 0
}

cp -L "$bin" "$root/bin/flowrun"
add_deps "$bin"
# The CUDA module beside flowrun (where its loader looks), and the tests the GPU check runs: each
# op's CUDA kernel against the CPU's (device_ops_test), the device communicator on NCCL
# (nccl_test) and the golden runs (parity_test).
bindir=$(dirname "$bin")
if [ -f "$bindir/libflowrun_cuda.so" ]; then
  cp -L "$bindir/libflowrun_cuda.so" "$root/bin/"
  add_deps "$bindir/libflowrun_cuda.so"
fi
for t in device_ops_test nccl_test parity_test; do
  if [ -x "$bindir/../tests/$t" ]; then cp -L "$bindir/../tests/$t" "$root/bin/"; add_deps "$bindir/../tests/$t"; fi
done

cp -L "$orterun" "$root/ompi/bin/orterun"
ln -s orterun "$root/ompi/bin/mpirun"
ln -s orterun "$root/ompi/bin/mpiexec"
add_deps "$orterun"
if [ -n "$orted" ]; then cp -L "$orted" "$root/ompi/bin/orted"; add_deps "$orted"; fi
if command -v ompi_info >/dev/null; then
  cp -L "$(command -v ompi_info)" "$root/ompi/bin/ompi_info"; add_deps "$(command -v ompi_info)"
fi

# The Open MPI tree mirrors this machine's relative to its prefix (/usr here): OPAL_PREFIX then
# relocates Libdir and Pkglibdir; env.sh also sets each directory explicitly.
ompi_prefix=$(ompi_path Prefix); : "${ompi_prefix:=/usr}"
rel_pkglib=${ompi_pkglibdir#"$ompi_prefix"/}
mkdir -p "$root/ompi/$rel_pkglib"
skipped=()
for p in "$ompi_pkglibdir"/*.so; do
  if plugin_ok "$p"; then
    cp -L "$p" "$root/ompi/$rel_pkglib/"
    add_deps "$p"
  else
    skipped+=("$(basename "$p" .so)")
  fi
done
ln -s "$rel_pkglib" "$root/ompi/pkglib"           # a fixed name for env.sh
cp -rL "$ompi_pkgdatadir" "$root/ompi/share/openmpi"
for f in openmpi-mca-params.conf openmpi-default-hostfile; do
  [ -f "$ompi_sysconfdir/$f" ] && cp -L "$ompi_sysconfdir/$f" "$root/ompi/etc/"
done
if [ -n "$pmix_pkglibdir" ]; then
  for p in "$pmix_pkglibdir"/*.so; do
    plugin_ok "$p" && { cp -L "$p" "$root/pmix/lib/pmix/"; add_deps "$p"; }
  done
fi
[ -n "$pmix_datadir" ] && cp -rL "$pmix_datadir" "$root/pmix/share/pmix"

# The libraries' own libraries (libpmix's libmunge, libhwloc's libudev, ...), to a fixed point.
while :; do
  before=$(ls "$root/lib" "$root/lib/compat" | wc -l)
  for l in "$root"/lib/*.so* "$root"/lib/compat/*.so*; do add_deps "$l"; done
  after=$(ls "$root/lib" "$root/lib/compat" | wc -l)
  [ "$before" = "$after" ] && break
done

# --- env.sh ------------------------------------------------------------------------------------
{
  echo "# flowrun bundle for a bare GPU machine, made by tools/gpu_bundle.sh. Source it from bash:"
  echo "#     source .bundle/env.sh"
  echo "# It unpacks flowrun-bundle.tar.xz (beside it) on first use into \$FLOWRUN_BUNDLE_ROOT"
  echo "# (default /tmp/flowrun-bundle), then sets PATH, LD_LIBRARY_PATH and Open MPI's and PMIx's"
  echo "# relocation variables. It changes nothing else and may be sourced again."
  cat <<'EOF'
_frb_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export FLOWRUN_BUNDLE_ROOT=${FLOWRUN_BUNDLE_ROOT:-/tmp/flowrun-bundle}
_frb_stamp=$(cat "$_frb_here/bundle.id" 2>/dev/null)
if [ ! -f "$FLOWRUN_BUNDLE_ROOT/bundle.id" ] || [ "$(cat "$FLOWRUN_BUNDLE_ROOT/bundle.id")" != "$_frb_stamp" ]; then
  rm -rf "$FLOWRUN_BUNDLE_ROOT"; mkdir -p "$FLOWRUN_BUNDLE_ROOT"
  if command -v xz >/dev/null 2>&1; then
    tar -xJf "$_frb_here/flowrun-bundle.tar.xz" -C "$FLOWRUN_BUNDLE_ROOT" --strip-components=1
  else  # no xz: Python's tarfile reads it
    python3 - "$_frb_here/flowrun-bundle.tar.xz" "$FLOWRUN_BUNDLE_ROOT" <<'PY'
import os, sys, tarfile
src, dst = sys.argv[1], sys.argv[2]
with tarfile.open(src, "r:xz") as t:
    for m in t.getmembers():
        m.name = m.name.split("/", 1)[1] if "/" in m.name else "."
        if m.name != ".":
            t.extract(m, dst, filter="fully_trusted") if hasattr(tarfile, "data_filter") else t.extract(m, dst)
PY
  fi
  [ -x "$FLOWRUN_BUNDLE_ROOT/bin/flowrun" ] && echo "$_frb_stamp" >"$FLOWRUN_BUNDLE_ROOT/bundle.id" \
    || echo "env.sh: unpacking $_frb_here/flowrun-bundle.tar.xz failed" >&2
fi
_r=$FLOWRUN_BUNDLE_ROOT
export PATH=$_r/bin:$_r/ompi/bin:$PATH
export LD_LIBRARY_PATH=$_r/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# CUDA's libraries for the CUDA module: PyTorch's wheels' (the versions PyTorch runs with, next
# to which flowrun is measured), else the machine's toolkit's.
for _d in /opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64; do
  if [ -e "$_d/libcublas.so.13" ] && [ -e "$_d/libcudart.so.13" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$_d; break; fi
done
# NCCL for the CUDA module's collectives: the nvidia-nccl wheel's, else the toolkit's.
for _d in /opt/*/.venv/lib/python3*/site-packages/nvidia/nccl/lib /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/local/cuda-13*/lib; do
  if [ -e "$_d/libnccl.so.2" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$_d; break; fi
done
# cuDNN 9 for the convolutions: the nvidia-cudnn wheel's, else the toolkit's.
for _d in /opt/*/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64; do
  if [ -e "$_d/libcudnn.so.9" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$_d; break; fi
done
unset _d
# libstdc++/libgcc_s from the bundle only where the machine's own do not serve flowrun.
if env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" ldd "$_r/bin/flowrun" 2>&1 | grep -qE 'not found'; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$_r/lib/compat
  export FLOWRUN_BUNDLE_COMPAT=1
fi
export OPAL_PREFIX=$_r/ompi
export OPAL_EXEC_PREFIX=$_r/ompi
export OPAL_BINDIR=$_r/ompi/bin
export OPAL_LIBDIR=$_r/lib
export OPAL_PKGLIBDIR=$(cd "$_r/ompi/pkglib" && pwd -P)
export OPAL_DATADIR=$_r/ompi/share
export OPAL_DATAROOTDIR=$_r/ompi/share
export OPAL_PKGDATADIR=$_r/ompi/share/openmpi
export OPAL_SYSCONFDIR=$_r/ompi/etc
# PMIx (Debian configures its directories as absolute paths, so PMIX_PREFIX alone moves none of
# them): without PMIX_LIBDIR/PMIX_PKGLIBDIR it dlopens the plugins of whatever PMIx the machine has
# at /usr/lib/x86_64-linux-gnu/pmix2 (the GPU machine has another version there: "undefined symbol").
export PMIX_PREFIX=$_r/pmix
export PMIX_EXEC_PREFIX=$_r/pmix
export PMIX_LIBDIR=$_r/pmix/lib
export PMIX_PKGLIBDIR=$_r/pmix/lib/pmix
export PMIX_DATADIR=$_r/pmix/share
export PMIX_DATAROOTDIR=$_r/pmix/share
export PMIX_PKGDATADIR=$_r/pmix/share/pmix
# hwloc's plugins (CUDA, NVML, ...) are not bundled; it needs none of them.
export HWLOC_PLUGINS_PATH=$_r/lib/hwloc-none
unset _r _frb_here _frb_stamp
EOF
} >"$out.env.tmp"

# --- Pack --------------------------------------------------------------------------------------
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no -- src meson.build 2>/dev/null | grep -q . && echo "+uncommitted" || true)
id="flowrun $("$bin" --version 2>/dev/null | awk '{print $2}') $commit$dirty $(sha256sum "$bin" | cut -c1-12) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "$id" >"$root/bundle.id"
unpacked=$(du -sb "$root" | cut -f1)
mkdir -p "$out"
rm -f "$out/flowrun-bundle.tar.xz"
tar -C "$stage" --transform 's,^root,flowrun-bundle,' -cf - root | xz -9e -T2 >"$out/flowrun-bundle.tar.xz.tmp"
mv "$out/flowrun-bundle.tar.xz.tmp" "$out/flowrun-bundle.tar.xz"
mv "$out.env.tmp" "$out/env.sh"
echo "$id" >"$out/bundle.id"
packed=$(stat -c %s "$out/flowrun-bundle.tar.xz")
{
  echo "$id"
  echo "binary: $bin (ldd here:)"
  ldd "$bin" | sed 's/^/  /'
  echo "unpacked: $unpacked bytes; packed (xz -9e): $packed bytes"
  echo "Open MPI plugins left out (fabrics): ${skipped[*]:-none}"
  echo "files:"
  (cd "$root" && find . -type f -printf '%s\t%p\n' | sort -k2)
} >"$out/MANIFEST.txt"
total=$(du -sb "$out" | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu_bundle: $id"
echo "gpu_bundle: $(find "$root" -type f | wc -l) files, $(mib "$unpacked") unpacked, $(mib "$packed") as flowrun-bundle.tar.xz; .bundle/ is $(mib "$total")"
echo "gpu_bundle: Open MPI plugins left out: ${#skipped[@]} (${skipped[*]:-none})"
if [ "$total" -gt $((55 * 1048576)) ]; then
  echo "gpu_bundle: .bundle/ is over 55 MiB: with the working tree it may not fit the 64 MiB that travels" >&2
  exit 1
fi

# --- Check it here, in a clean environment -----------------------------------------------------
[ "${FLOWRUN_BUNDLE_NOCHECK:-0}" = 1 ] && exit 0
check_root=$stage/unpacked
check=$(cat <<'EOF'
set -uo pipefail
source .bundle/env.sh || exit 1
r=$FLOWRUN_BUNDLE_ROOT
bad=0
for f in "$r"/bin/* "$r"/ompi/bin/orterun "$r"/ompi/bin/ompi_info "$r"/ompi/pkglib/*.so "$r"/pmix/lib/pmix/*.so "$r"/lib/*.so*; do
  while read -r name arrow path _; do
    case "$name" in linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*|libresolv.so*|libstdc++.so*|libgcc_s.so*) continue ;; esac
    # the GPU machine's own (its toolkit's, or PyTorch's wheels'), which env.sh puts on the path
    case "$name" in libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*|libcudnn*.so*) continue ;; esac
    if [ "$arrow" = "=>" ] && [ "${path#"$r"/}" = "$path" ]; then echo "  outside the bundle: $f needs $name => $path"; bad=1; fi
  done < <(ldd "$f" 2>&1 | grep '=>')
  ldd "$f" 2>&1 | grep -q 'not found' && { echo "  not found: $f"; ldd "$f" | grep 'not found'; bad=1; }
done
[ $bad = 0 ] && echo "check: every library resolves inside the bundle or to glibc/libstdc++"
flowrun --version || bad=1
# The CUDA module loads (every symbol it needs from flowrun resolves), and says there is no GPU.
if [ -f "$r/bin/libflowrun_cuda.so" ]; then
  out=$(flowrun train configs/mlp.yaml --set parallel.device=cuda 2>&1)
  echo "check: parallel.device=cuda here: $out"
  grep -q "no GPU is visible" <<<"$out" || bad=1
fi
ompi_info --path all | grep -E 'Prefix|Pkglibdir|Sysconfdir' | sed 's/^ */  ompi_info: /'
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 120 mpirun -n 2 --oversubscribe flowrun train configs/mlp.yaml --set train.steps=20 --set log.jsonl=/tmp/flowrun-bundle-check.jsonl </dev/null >"$r/mpirun.log" 2>&1
rc=$?
tail -2 "$r/mpirun.log"
echo "check: mpirun -n 2 flowrun train configs/mlp.yaml: exit $rc"
[ "$rc" = 0 ] || bad=1
# A plugin opened from this machine's directories (the decoys planted there, or any other) means
# a relocation variable is missing.
if grep -E 'decoy|unable to open|component_repository_open' "$r/mpirun.log"; then
  echo "check: Open MPI or PMIx looked for plugins outside the bundle"; bad=1
fi
exit $bad
EOF
)
hide=()
for d in "$ompi_libdir" "$ompi_pkgdatadir" "$ompi_sysconfdir" /usr/lib/x86_64-linux-gnu/pmix2; do
  [ -d "$d" ] && hide+=("$d")
done
runner=(env -i HOME="$HOME" PATH=/usr/bin:/bin TERM=dumb FLOWRUN_BUNDLE_ROOT="$check_root" bash -c)
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && unshare -m true 2>/dev/null; then
  mounts=""
  for d in "${hide[@]}"; do mounts+="mount -t tmpfs none '$d' && "; done
  # Decoy plugins where this machine's Open MPI and PMIx look by default: the bundle must not open them.
  for p in "$ompi_pkglibdir/mca_btl_decoy.so" "${pmix_pkglibdir:-/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix}/pmix_mca_pcompress_decoy.so"; do
    mounts+="mkdir -p '$(dirname "$p")' && echo decoy >'$p' && "
  done
  echo "gpu_bundle: checking in env -i with this machine's ${hide[*]} hidden (unshare -m)"
  "${runner[@]}" "unshare -m bash -c \"${mounts}cd '$repo' && bash -s\"" <<<"$check"
else
  echo "gpu_bundle: checking in env -i (this machine's Open MPI stays visible: no unshare)"
  "${runner[@]}" "cd '$repo' && bash -s" <<<"$check"
fi
