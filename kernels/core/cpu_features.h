// Run-time CPU feature checks for kernels that have an AVX-512 path beside a portable one.
// Binaries are built for baseline x86-64; functions compiled with VLM_TARGET_AVX512 may only be
// called after use_avx512() returned true.
#pragma once

namespace vlm {

// The attribute for functions that use AVX-512 F/BW/VL (and F16C) intrinsics.
#define VLM_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))

// What the CPU (and OS) support: AVX-512 F/BW/VL with F16C and FMA; AVX2 with FMA.
// Fixed for the process; checked once.
bool cpu_has_avx512();
bool cpu_has_avx2_fma();
// AVX-512 (as above) plus AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16).
bool cpu_has_avx512_bf16();

// True when cpu_has_avx512() and the path was not switched off with set_avx512_enabled(false).
// Every kernel with an AVX-512 path asks this, so one switch selects the portable code everywhere.
bool use_avx512();

// Tests only: switches the AVX-512 paths off (false) or back on where the CPU has them (true),
// so the portable paths can be checked on an AVX-512 machine. Not safe while kernels run.
void set_avx512_enabled(bool enabled);

}  // namespace vlm
