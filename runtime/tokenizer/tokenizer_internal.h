/* tokenizer_internal.h: the tokenizer's private struct and the helpers its source files
 * share (tokenizer.c core + BPE, tokenizer_pretok.c splits, tokenizer_json.c loader,
 * chat_template.c). Not part of the public API; tests may include it. */
#ifndef SKV_TOKENIZER_INTERNAL_H
#define SKV_TOKENIZER_INTERNAL_H
#include "tokenizer.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GGUF token types (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. */
enum { SKV_TOKT_NORMAL = 1, SKV_TOKT_UNKNOWN = 2, SKV_TOKT_CONTROL = 3, SKV_TOKT_USER = 4,
       SKV_TOKT_UNUSED = 5, SKV_TOKT_BYTE = 6 };

/* Pre-tokenizer kinds (how text is cut into words before BPE). */
typedef enum {
    SKV_PRE_GPT2 = 0,   /* GPT-2 ByteLevel regex */
    SKV_PRE_SMOLLM = 1, /* every \p{N} isolated (Digits individual), then the GPT-2 regex */
    SKV_PRE_QWEN2 = 2,  /* Qwen2 Split regex (single digits, (?i) contractions, ...) */
} skv_pretok_kind;

struct skv_tokenizer {
    int n_vocab;
    char **tok;           /* (n_vocab) raw bytes of each token (byte-level mapping undone); NULL = hole */
    uint32_t *tok_len;    /* (n_vocab) */
    uint8_t *tok_type;    /* (n_vocab) SKV_TOKT_* */
    /* vocab hash: open addressing over raw bytes -> id (-1 empty) */
    int32_t *vslot; uint32_t vmask;
    /* merges, in rank order, and a hash (a,b) -> rank */
    int n_merges, cap_merges;
    int32_t *merge_a, *merge_b, *merge_res;   /* (n_merges) */
    uint64_t *mkey; int32_t *mrank; uint32_t mmask;  /* mkey 0 = empty (key stores a,b +1) */
    int byte_id[256];     /* id of each single-byte token, -1 if absent */
    int *special;         /* ids matched in text (control / user-defined), longest first */
    int n_special;
    skv_pretok_kind pre;
    char model[16];       /* "gpt2" */
    char pre_name[32];    /* "qwen2", "smollm", "gpt2" */
    int bos, eos, eot;
    bool add_bos;
    char *chat_template;  /* heap, may be NULL */
    /* SentencePiece ('llama' GGUF model, tokenizer_spm.c): pieces stored with U+2581 as a
     * space and byte pieces <0xNN> as their byte; score per id; no merges */
    bool spm;
    bool spm_space_prefix;   /* prepend a space to text after BOS / a special token */
    float *score;            /* (n_vocab) for spm, else NULL */
    char name[96];
    uint64_t hash;
};

/* Building (used by the GGUF and JSON loaders, in this order):
 *   skv_tok_new(n) -> skv_tok_set_token(...) for each id -> skv_tok_index_vocab
 *   -> skv_tok_add_merge(...) in rank order -> skv_tok_finish. */
skv_tokenizer *skv_tok_new(int n_vocab);
/* text: the token as stored (byte-level alphabet for normal tokens). -1 + error. */
int skv_tok_set_token(skv_tokenizer *t, int id, const char *text, size_t len, int type);
/* The same with text taken as raw bytes (added tokens of a tokenizer.json). */
int skv_tok_set_raw(skv_tokenizer *t, int id, const char *text, size_t len, int type);
int skv_tok_index_vocab(skv_tokenizer *t);
/* a, b in the byte-level alphabet. -1 + error if a, b or a+b is not in the vocabulary. */
int skv_tok_add_merge(skv_tokenizer *t, const char *a, size_t la, const char *b, size_t lb);
/* Special-token list, byte ids, hash, name. src names the file in errors. */
int skv_tok_finish(skv_tokenizer *t, const char *src);
/* id of raw bytes in the vocabulary, -1 if absent. */
int skv_tok_lookup(const skv_tokenizer *t, const char *bytes, size_t len);

/* SentencePiece (tokenizer_spm.c): the loader behind skv_tokenizer_from_gguf for model
 * 'llama', and the encoder of one text fragment (no specials), calling push for each id. */
skv_tokenizer *skv_spm_from_gguf(const void *gguf_file);
int skv_spm_encode(const skv_tokenizer *t, const char *text, size_t len, bool after_special,
                   int (*push)(void *ctx, int id), void *ctx);

/* GPT-2 byte <-> unicode mapping. */
uint32_t skv_byte_to_unicode(uint8_t b);
int skv_unicode_to_byte(uint32_t cp);   /* -1 if not in the alphabet */
/* Strict UTF-8 decode of one code point: returns bytes used (1..4); an invalid byte gives
 * 1 and *cp = SKV_CP_INVALID. n >= 1. */
#define SKV_CP_INVALID 0xFFFFFFFFu
int skv_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
int skv_utf8_encode(uint32_t cp, char out[4]);

/* Pre-tokenizer: cut text[0..len) into words; calls fn(word, word_len, ctx) for each in
 * order (a non-zero return stops and is returned). */
typedef int (*skv_word_fn)(const char *word, size_t len, void *ctx);
int skv_pretokenize(skv_pretok_kind kind, const char *text, size_t len, skv_word_fn fn, void *ctx);
/* Recognise a GGUF tokenizer.ggml.pre name; -1 if unsupported. */
int skv_pretok_from_name(const char *name);

#endif
