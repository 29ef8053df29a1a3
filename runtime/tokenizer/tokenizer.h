/* tokenizer.h: byte-level BPE tokenizer (GPT-2 style, as used by SmolLM2 and Qwen2),
 * its pre-tokenizer splits, special tokens and the chat template.
 *
 * Loaded from GGUF metadata (tokenizer.ggml.*) or a Hugging Face tokenizer.json.
 * Token ids equal those of the Hugging Face `tokenizers` implementation. */
#ifndef SKV_TOKENIZER_H
#define SKV_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct skv_tokenizer skv_tokenizer;

/* From an open GGUF file (gguf_file*, see gguf.h). NULL + error if it has no usable tokenizer. */
struct gguf_file_s;
skv_tokenizer *skv_tokenizer_from_gguf(const void *gguf_file);
/* From a tokenizer.json path (optionally a tokenizer_config.json beside it for the chat template). */
skv_tokenizer *skv_tokenizer_from_json(const char *path);
void skv_tokenizer_free(skv_tokenizer *t);

int skv_tok_vocab_size(const skv_tokenizer *t);
/* Encode len bytes of UTF-8 (or arbitrary bytes). parse_special: recognise special/control
 * tokens such as <|im_start|> in the text. Writes up to max ids; returns the total count
 * needed (may exceed max: call again with a bigger buffer), -1 + error on failure. */
int skv_tokenize(const skv_tokenizer *t, const char *text, size_t len, bool parse_special,
                 int *ids, int max);
/* Raw bytes of one token (the byte-level mapping undone). *len set; NULL for a bad id. */
const char *skv_token_bytes(const skv_tokenizer *t, int id, size_t *len);
/* Decode a sequence to a heap NUL-terminated string (bytes concatenated, specials included
 * as their text). */
char *skv_detokenize(const skv_tokenizer *t, const int *ids, int n);

int skv_tok_bos(const skv_tokenizer *t);       /* -1 if none */
int skv_tok_eos(const skv_tokenizer *t);       /* end of sequence / <|im_end|> style stop */
bool skv_tok_add_bos(const skv_tokenizer *t);  /* prepend BOS when encoding a document */
bool skv_tok_is_stop(const skv_tokenizer *t, int id); /* eos, eot, <|im_end|>, <|endoftext|> */

/* Chat prompt for one user message (optional system message, NULL = the model's default),
 * ending with the assistant turn's header, as the model's chat template renders it.
 * Heap string; NULL + error if the template is unknown. */
char *skv_chat_prompt(const skv_tokenizer *t, const char *system, const char *user);
/* A conversation of n messages (roles "system", "user", "assistant"), ending with the
 * assistant turn's header. Heap string; NULL + error (unknown template or role). */
char *skv_chat_render(const skv_tokenizer *t, const char *const *roles, const char *const *contents, int n);

/* 64-bit fingerprint of vocabulary + merges + special ids: equal iff the tokenizers are
 * the same (used to refuse mismatched model pairs). */
uint64_t skv_tokenizer_hash(const skv_tokenizer *t);
const char *skv_tokenizer_name(const skv_tokenizer *t); /* e.g. "gpt2/qwen2 (151936 tokens)" */

#endif
