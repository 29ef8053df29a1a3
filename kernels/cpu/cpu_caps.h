/* cpu_caps.h: which optional instruction sets the CPU kernels may use on this machine. */
#ifndef SKV_CPU_CAPS_H
#define SKV_CPU_CAPS_H
#include <stdbool.h>

/* true when the CPU (and the OS) has AVX-512 F/BW/VL/VNNI and SKV_CPU does not pin the AVX2
 * baseline (SKV_CPU=avx2); read once. Kernels with such a variant give the same bits. */
bool skv_cpu_vnni(void);
/* true when skv_cpu_vnni() and the CPU has AMX-TILE + AMX-INT8 that Linux lets this process use
 * (asked for on the first call) and SKV_CPU does not pin a lower level (SKV_CPU=vnni or avx2). */
bool skv_cpu_amx(void);
/* true when skv_cpu_amx() and the CPU also has AMX-BF16 and AVX512-BF16 (the opt-in bf16 prefill
 * attention, attention_bf16.h). */
bool skv_cpu_amx_bf16(void);

#endif
