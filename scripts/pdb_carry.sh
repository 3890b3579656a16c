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
