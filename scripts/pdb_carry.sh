# pdb_carry.sh: pack binaries for the device machine (sourced by bench/run_device.sh and
# tools/cuda_validate.sh). The GPU image has no -dev packages, so the non-system shared libraries
# the binaries link go with them; the result is one tar.xz (the device's carry limit is 64 MiB).
#   pdb_carry_pack CARRY_DIR BIN...  -> CARRY_DIR/<basename CARRY_DIR>.tar.xz holding bin/ and lib/
# Invariant: CARRY_DIR holds nothing but the archive afterwards; its size is printed.
pdb_carry_pack() {
  local carry=$1
  shift
  rm -rf "$carry" && mkdir -p "$carry/bin" "$carry/lib"
  cp "$@" "$carry/bin/"
  for b in "$carry"/bin/*; do
    ldd "$b" | awk '/=> \//{print $3}' | while read -r so; do
      case "$(basename "$so")" in libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s*|libstdc++*) ;;
        *) cp -Ln "$so" "$carry/lib/" 2>/dev/null || true ;;
      esac
    done
  done
  tar cJf "$carry.tar.xz" -C "$(dirname "$carry")" "$(basename "$carry")"
  rm -rf "$carry" && mkdir -p "$carry" && mv "$carry.tar.xz" "$carry/"
  du -sh "$carry"
}

# On the GPU machine: CARRY_DIR's archive (when there) unpacked to /tmp/devcarry, CARRY set to where the
# binaries are (CARRY/bin), and LD_LIBRARY_PATH to their libraries, the CUDA toolkit's and the pip
# wheel's cuBLAS (the GPU image's torch ships it; there is no system one).
#   pdb_carry_unpack CARRY_DIR
pdb_carry_unpack() {
  CARRY=$1
  if [ -f "$CARRY/devcarry.tar.xz" ]; then tar xJf "$CARRY/devcarry.tar.xz" -C /tmp && CARRY=/tmp/devcarry; fi
  local cublas_dir
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="$CARRY/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
}
