# Cross build for aarch64 Linux on a Debian x86-64 host (`make test-arm64`, scripts/test_arm64.sh):
# Debian's cross compiler (gcc-aarch64-linux-gnu) against the arm64 multiarch -dev packages in
# /usr/lib/aarch64-linux-gnu and /usr/include/aarch64-linux-gnu (dpkg --add-architecture arm64;
# scripts/setup.sh --arm64 installs them). Test executables run under qemu-user (ctest prefixes
# them with CMAKE_CROSSCOMPILING_EMULATOR), so `ctest -L unit` works in the cross build dir.
# usage: cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DPDB_NO_CUDA=ON
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
# gcc by default; `-DCMAKE_C_COMPILER=clang -DCMAKE_C_COMPILER_TARGET=aarch64-linux-gnu` builds with
# clang instead (Apple's compiler family: a check of the NEON code under clang's arm_neon.h).
if(NOT CMAKE_C_COMPILER)
  set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
endif()
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Headers and libraries come from the multiarch paths of the host's own root (no separate sysroot).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
find_program(PDB_QEMU_AARCH64 qemu-aarch64)
if(PDB_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${PDB_QEMU_AARCH64})
endif()
# nvcc is an x86 compiler here: the cross build never enables CUDA.
set(PDB_NO_CUDA ON CACHE BOOL "cross build: no CUDA" FORCE)
