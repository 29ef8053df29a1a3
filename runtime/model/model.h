/* model.h: a loaded decoder (Llama 2/3, Mistral, Qwen2, Qwen3, Gemma 3 text): its config and
 * its weights. The features beyond the plain Llama/Qwen2 block (RoPE scaling, q/k norms,
 * sliding windows, Gemma's norms and GeGLU) are fields that are zero for a plain model;
 * runtime/model/model_arch.c owns their derived tables and names them for refusals.
 *
 * Weights point into the model file's memory map (GGUF) or into loaded safetensors
 * buffers; the model never copies them. Matrices are row-major [rows x cols] where
 * cols is the input dimension (GGUF ne[0]), so y = W x is a dot product per row. */
#ifndef SKV_MODEL_H
#define SKV_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/tensor.h"

typedef enum { SKV_ARCH_LLAMA = 0, SKV_ARCH_QWEN2 = 1, SKV_ARCH_QWEN3 = 2, SKV_ARCH_GEMMA3 = 3,
               SKV_ARCH_MISTRAL = 4 } skv_arch;
typedef enum { SKV_ACT_SILU = 0, SKV_ACT_GELU_TANH = 1 } skv_act;
/* RoPE frequency scaling of the global layers (Llama 3.x: LLAMA3; linear: positions / factor) */
typedef enum { SKV_ROPE_SCALE_NONE = 0, SKV_ROPE_SCALE_LINEAR = 1, SKV_ROPE_SCALE_LLAMA3 = 2 } skv_rope_scale;

typedef struct {
    skv_arch arch;
    int n_layer;       /* L */
    int dim;           /* model width C */
    int n_head;        /* H query heads */
    int n_kv_head;     /* Hkv */
    int head_dim;      /* d */
    int ffn_dim;       /* SwiGLU hidden width */
    int vocab;         /* rows of the embedding / LM head */
    int ctx_max;       /* trained context length */
    float rope_theta;
    float norm_eps;
    skv_rope_mode rope_mode;
    int tied_embeddings;   /* LM head = token embedding matrix */
    int has_qkv_bias;
    /* beyond llama/qwen2; all zero for a plain model */
    skv_rope_scale rope_scale;
    float rope_factor, rope_low_freq, rope_high_freq;   /* linear / llama3 parameters */
    int rope_orig_ctx;                                  /* llama3: original_max_position_embeddings */
    float rope_theta_local;  /* RoPE base of the sliding-window layers (gemma3); 0 = rope_theta */
    int sliding_window;      /* keys a windowed layer sees, itself included; 0 = none */
    int n_window_layers;     /* layers with skv_layer.window set */
    int has_qk_norm;         /* RMSNorm per head on q and k before RoPE (qwen3, gemma3) */
    int has_post_norms;      /* gemma3: norms after attention and after the MLP, before the residual */
    skv_act act;             /* MLP gate activation */
    float embd_scale;        /* embeddings times this (gemma3: sqrt(C)); 0 = 1 */
    float attn_scale;        /* softmax scale; 0 = 1/sqrt(head_dim) */
    float final_softcap;     /* logits = cap * tanh(logits / cap); 0 = none */
} skv_config;

typedef struct {
    skv_weight attn_norm;              /* F32 [C] */
    skv_weight wq, wk, wv, wo;         /* [H*d x C], [Hkv*d x C], [Hkv*d x C], [C x H*d] */
    skv_weight bq, bk, bv;             /* F32 biases (qwen2), data NULL when absent */
    skv_weight ffn_norm;               /* F32 [C] */
    skv_weight w_gate, w_up, w_down;   /* [F x C], [F x C], [C x F] */
    skv_weight q_norm, k_norm;         /* F32 [d] per-head norms (qwen3, gemma3), data NULL when absent */
    skv_weight post_attn_norm, post_ffn_norm;   /* F32 [C] (gemma3), data NULL when absent */
    int window;                        /* sliding window of this layer in keys, 0 = global */
} skv_layer;

struct skv_tokenizer;
struct gguf_file_s;

typedef struct skv_model {
    char *path;
    char *name;                /* general.name or directory name */
    skv_config cfg;
    skv_weight tok_embd;       /* [vocab x C] */
    skv_weight out_norm;       /* F32 [C] */
    skv_weight output;         /* [vocab x C] (== tok_embd when tied) */
    skv_layer *layers;         /* [L] */
    struct skv_tokenizer *tok; /* NULL if the file has none */
    /* ownership: exactly one of these is set */
    void *gguf;                /* gguf_file* */
    void *hf;                  /* hf model storage (safetensors maps, converted buffers) */
    size_t weight_bytes;       /* bytes of all weights as stored */
    void *pack_arena;          /* the pair-packed decode copies, one huge-page block */
    size_t pack_bytes;         /* its bytes (runtime/model/model_pack.c) */
    float *rope_freq;          /* [d/2] inverse frequencies of the global layers (scaling applied) */
    float *rope_freq_local;    /* [d/2] of the sliding-window layers (== rope_freq unless gemma3) */
} skv_model;

/* Load a GGUF file or a Hugging Face directory (config.json + *.safetensors).
 * NULL + skv_last_error() on failure. */
skv_model *skv_model_load(const char *path);
/* skv_model_load with flags: SKV_LOAD_NO_PACK skips the decode copies (skv_model_pack), for
 * tools that only read shapes or metadata; SKV_LOAD_MAPPED memory-maps a GGUF file (pages
 * read on first touch) instead of reading it into huge-page memory (common/hugemem.h),
 * as the environment's SKV_MMAP=1 does for every load: the decode sweeps the weights
 * faster from huge pages, a mapping costs nothing for the pages never read. */
enum { SKV_LOAD_NO_PACK = 1, SKV_LOAD_MAPPED = 2 };
skv_model *skv_model_load_ex(const char *path, int flags);
skv_model *skv_model_load_gguf(const char *path);
skv_model *skv_model_load_hf(const char *dir);
/* Frees tok, layers, name, path, then the storage: gguf_close(gguf) or skv_hf_free(hf). */
void skv_model_free(skv_model *m);
/* Release the storage behind m->hf (written by the Hugging Face loader, runtime/model/model_hf.c). */
void skv_hf_free(void *hf);

/* The decode layouts (runtime/model/model_pack.c), made by skv_model_load_gguf unless the
 * environment has SKV_PACK=0 (or skv_model_load_ex got SKV_LOAD_NO_PACK), for every layer
 * matrix and the LM head:
 *   - Q4_K, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 matrices (rows % 8 == 0) repacked in place
 *     into 8-row groups (skv_weight.x8) when the weights are in writable memory (not
 *     SKV_MMAP): no extra memory, a faster decode GEMV whose results differ from the
 *     stored layout's by float rounding;
 *   - a pair-packed copy (skv_weight.pack) of each other 32-wide nibble matrix (Q4_0/Q4_1/
 *     Q5_0/Q5_1, columns a multiple of 64): the same bytes again in memory, bit-identical
 *     results, a faster decode GEMV.
 * skv_model_pack returns 0, or -1 + error (out of memory for the copies: then none is
 * kept). skv_model_unpack frees the copies and restores the stored layout. */
int skv_model_pack(skv_model *m);
void skv_model_unpack(skv_model *m);
/* rows r0 .. r0+n-1 of w as stored in the file (whatever w's layout) -> dst (n row bytes) */
void skv_weight_stored_rows(const skv_weight *w, int64_t r0, int64_t n, void *dst);
/* Bytes the decode copies of m take (or would take), made or not, given the layout m has. */
size_t skv_model_pack_size(skv_model *m);
/* What a load into writable memory (the default) does to m's matrices: bytes regrouped into
 * 8-row groups in place, bytes of pair-packed copies. */
void skv_model_layout_plan(skv_model *m, size_t *x8_bytes, size_t *copy_bytes);

/* runtime/model/model_arch.c. The RoPE tables of m from its config (factors: NULL, or [d/2]
 * per-frequency divisors, a GGUF file's rope_freqs tensor); 0 or -1 + error. */
int skv_model_rope_init(skv_model *m, const float *factors);
/* The inverse-frequency table of layer l (local for a windowed layer). */
const float *skv_model_rope_freq(const skv_model *m, int l);
/* The architecture's name as the loaders spell it ("llama", "qwen3", "gemma3", ...). */
const char *skv_arch_name(skv_arch a);
/* The first feature of c beyond the plain llama/qwen2 block ("sliding-window attention",
 * "llama3 RoPE scaling", ...), or NULL when c has none: for backends that refuse them. */
const char *skv_config_extra_feature(const skv_config *c);
/* Refuse a config a loader filled in that the engine cannot run exactly (window or softcap
 * values out of range, ...): 0 or -1 + error naming path. */
int skv_config_check(const skv_config *c, const char *path);

/* Bytes of K+V per token for the whole model at the given cache element size. */
size_t skv_model_kv_bytes_per_token(const skv_model *m, size_t elem_bytes);

#endif
