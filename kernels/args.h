/* args.h: the argument structs of the attention kernels, shared by every backend: the CPU
 * kernels (kernels/cpu/attention.h, compensate.h: their contracts and shapes) and the CUDA
 * launchers (kernels/cuda/backend.h) take the same structs. */
#ifndef SKV_KERNEL_ARGS_H
#define SKV_KERNEL_ARGS_H
#include <stdbool.h>

/* causal GQA attention over a contiguous cache (kernels/cpu/attention.h) */
typedef struct {
    int T, H, Hkv, d;
    int pos0;            /* position of the first query row */
    int S_cap;           /* stride (in tokens) of each KV head's cache */
    bool kv_f16;         /* cache element type: fp16 (true) or fp32 */
    int k_bits, v_bits;  /* 0: K (V) rows as kv_f16 says; 8 / 4: rows of quantised groups
                            (kernels/cpu/kvquant.h), the CPU kernels only (attention_q.c) */
    const float *k_norm; /* quantised keys only: NULL, or (2, Hkv, d): each KV head's key offset
                            mu, then its scale sigma; the key rows hold (k - mu) / sigma and
                            the query is scaled by sigma (kvquant.h, "Key normalisation") */
    float *colsum;       /* optional (H, S_cap), accumulated */
    float *lastrow;      /* optional (H, S_cap), overwritten for k < pos0 + T */
    /* skv_attention_team at T = 1 only, else NULL: this token's rotated key and value
     * (Hkv, d), not yet in the cache; written into row pos0 of each KV head by the thread
     * that reads that row, so the caller needs no barrier between computing them and
     * the attention */
    const float *knew, *vnew;
} skv_attn_args;

/* decode attention over the hot tier with marginal compensation (kernels/cpu/compensate.h) */
typedef enum { SKV_COMBINE_SUM = 0, SKV_COMBINE_MASS = 1, SKV_COMBINE_RENORM = 2 } skv_combine;

typedef struct {
    int g, d;
    int n_hot, n_marg;
    bool f16;
    const void *k, *v;    /* (n_hot, d) */
    const void *vm;       /* (n_marg, d) */
    const float *pm;      /* (g, n_marg) SLM attention at each marginal slot, or NULL */
    const float *w;       /* (g) SLM mass on the hot tokens (MASS / RENORM), NULL = 1 */
    const int *mult;      /* (n_hot) tokens each K+V slot stands for, or NULL (all 1) */
    const unsigned char *head_mask;   /* (g, n_hot): 1 where query head h attends slot s, 0 where
                                         it does not (per-attention-head selection: the slots
                                         hold the union of the heads' sets), or NULL (all);
                                         every head must see at least one slot */
    skv_combine combine;
    float *slot_acc;      /* optional (n_hot) */
    float *head_p;        /* optional (g, n_hot) */
    float *scratch;       /* (n_hot) floats, caller-provided */
} skv_comp_args;

#endif
