/* tiny_model.h: deterministic random tiny models (Llama/Qwen2, and through tiny_model_new_family
 * Llama 3, Mistral, Qwen3, Gemma 3) built in memory, written out as a
 * Hugging Face directory (config.json + safetensors, single file or sharded with an index)
 * and as a GGUF file, so tests can check that both loaders see the same model.
 *
 * Weights are kept in the Hugging Face layout: linear weights [out, in] row-major, Q/K rows
 * in the "halves" RoPE order. The GGUF llama writer permutes Q/K rows into the adjacent-pair
 * order as the HF->GGUF converter does; qwen2 GGUF files keep the HF order. */
#ifndef SKV_TINY_MODEL_H
#define SKV_TINY_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "runtime/model/model.h"

typedef struct {
    float *attn_norm;          /* [C] */
    float *wq, *wk, *wv, *wo;  /* [H*d x C], [Hkv*d x C], [Hkv*d x C], [C x H*d] */
    float *bq, *bk, *bv;       /* [H*d], [Hkv*d], [Hkv*d]; NULL without biases */
    float *ffn_norm;           /* [C] */
    float *gate, *up, *down;   /* [F x C], [F x C], [C x F] */
    float *q_norm, *k_norm;    /* [d] (qwen3, gemma3), else NULL */
    float *post_attn_norm, *post_ffn_norm;   /* [C] (gemma3), else NULL */
    int window;                /* sliding window of this layer, 0 = global */
} tiny_layer;

typedef struct {
    skv_config cfg;            /* arch, sizes, theta, eps, tied, has_qkv_bias (rope_mode unused) */
    float *embd;               /* [vocab x C] */
    float *out_norm;           /* [C] */
    float *output;             /* [vocab x C]; NULL when tied */
    tiny_layer *layers;        /* [L] */
    /* one more GGUF metadata key for refusal tests (NULL: none): a string when gguf_extra_str
     * is set, else the F32 gguf_extra_f32 */
    const char *gguf_extra_key, *gguf_extra_str;
    float gguf_extra_f32;
    /* 1: tiny_model_write_gguf also writes a byte-level BPE tokenizer (GGUF model "gpt2",
     * pre "qwen2"): the 256 byte tokens, then merges of frequent English letter pairs up to
     * the vocabulary (tiny_bpe_merges), no special tokens. Lets the calibration and the CLI
     * read text with a tiny model */
    int byte_bpe;
} tiny_model;

/* 2 layers, dim 64, 4 heads / 2 kv heads, head_dim 16, ffn 96, vocab 300. qwen2 gets q/k/v
 * biases. round_type (SKV_F32, SKV_F16 or SKV_BF16): every value is rounded through that type
 * so files of that type hold the model exactly. NULL on allocation failure. */
tiny_model *tiny_model_new(skv_arch arch, uint64_t seed, int tied, int round_type);
/* The same with other sizes (still 2 layers): dim, ffn, heads, kv heads, head size, vocab. */
typedef struct { int dim, ffn, n_head, n_kv_head, head_dim, vocab; } tiny_dims;
tiny_model *tiny_model_new_dims(skv_arch arch, uint64_t seed, int tied, int round_type, tiny_dims dims);
void tiny_model_free(tiny_model *m);
/* A tiny model of a family with the features it is tested for, 2 layers, F32:
 *   "llama3"  llama with llama3 RoPE scaling (factor 8, low 1, high 4, original context 64)
 *   "mistral" mistral, a sliding window of 48 on both layers
 *   "qwen3"   qwen3 (per-head q/k norms, no biases)
 *   "gemma3"  gemma3_text: layer 0 sliding (window 48, RoPE base 10000), layer 1 global (RoPE
 *             base 50000, linear scaling x2), (1+w) norms incl. post-norms, q/k norms, GeGLU,
 *             embedding scale, tied head, final logit softcap 30
 * Gemma's norm weights are kept as Hugging Face stores them (w); the GGUF writer stores 1 + w
 * as the converter does. NULL for an unknown family. */
tiny_model *tiny_model_new_family(const char *family, uint64_t seed);

/* Write dir/config.json and the weights as `type` (SKV_F32/F16/BF16): n_shards == 1 ->
 * model.safetensors; n_shards > 1 -> model-0000i-of-0000n.safetensors + index.json.
 * dir must exist. 0 or -1 with skv_last_error(). */
int tiny_model_write_hf(const tiny_model *m, const char *dir, int type, int n_shards);
/* Write a GGUF file (matrices as `type`, norms/biases F32). 0 or -1. */
int tiny_model_write_gguf(const tiny_model *m, const char *path, int type);

/* One tensor for tiny_write_safetensors: data is float, written converted to `type`. */
typedef struct {
    const char *name;
    int type;                  /* SKV_F32 / SKV_F16 / SKV_BF16 */
    int n_dims;
    int64_t shape[2];
    const float *data;
} tiny_tensor;
/* A well-formed safetensors file (header padded to 8 bytes). 0 or -1. */
int tiny_write_safetensors(const char *path, const tiny_tensor *t, int n);
/* Raw file for malformed-file tests: the 8-byte length field says header_len (which may
 * lie), then header_bytes of header, then data_len bytes of data. 0 or -1. */
int tiny_write_raw(const char *path, uint64_t header_len, const char *header, size_t header_bytes,
                   const void *data, size_t data_len);

/* The tiny model (tiny_model_new(arch, seed, untied, F32)) written to a temporary GGUF file
 * (/tmp/skv_test_<tag>_<pid>.gguf, removed again) and loaded. NULL + error. */
skv_model *tiny_model_load(skv_arch arch, uint64_t seed, const char *tag);
/* SmolLM2-135M-Instruct.Q4_1.gguf from $SKV_MODELS_DIR (default "models"), or NULL when the
 * file is not there (the caller skips). */
skv_model *test_load_smollm2(void);
/* The same with skv_model_load_ex flags (SKV_LOAD_MAPPED: no 8-row groups, pair-packed copies). */
skv_model *test_load_smollm2_ex(int flags);
/* The pair most runtime tests share, for a cmocka group setup: *tiny = tiny_model_load(arch,
 * seed, tag), *smol = test_load_smollm2() (NULL when absent: its tests skip). 0, or -1 when
 * the tiny model cannot be made. test_models_free releases both. */
int test_models_load(skv_model **tiny, skv_model **smol, skv_arch arch, uint64_t seed, const char *tag);
void test_models_free(skv_model **tiny, skv_model **smol);

#endif
