/* longctx.h: the long-context inputs of `smallkv eval` (docs/lab/long-context-tasks.md):
 *   niah        RULER-style needle retrieval: pg-essays prose with "One of the special magic
 *               numbers for KEY is: VALUE." needles (7-digit values, adjective-noun keys)
 *               inserted after sentence ends at given depths; three kinds as RULER defines
 *               them: single (one needle, its value asked), multikey (N needles with
 *               distinct keys, one asked), multivalue (N values for one key, all asked);
 *               RULER's template (intro, context, question, answer prefix), the whole
 *               prompt exactly `length` tokens; deterministic in (kind, length, depth, seed);
 *   padding     irrelevant prose (pg-essays, from its start) before a prompt until the
 *               prompt has a target number of tokens (bbh / gsm8k --pad-to);
 *   longbench   LongBench records (data/longbench/<subset>.jsonl) formatted with the
 *               official template (dataset2prompt.json, Python str.format rules), the
 *               generation length from dataset2maxlen.json, and pred.py's truncation in
 *               the middle of the tokenised prompt. */
#ifndef SKV_EVAL_LONGCTX_H
#define SKV_EVAL_LONGCTX_H
#include <stdbool.h>
#include <stddef.h>
#include <cJSON.h>
#include "runtime/tokenizer/tokenizer.h"

/* ---- niah ---- */
typedef enum { SKV_NIAH_SINGLE = 0, SKV_NIAH_MULTIKEY = 1, SKV_NIAH_MULTIVALUE = 2, SKV_NIAH_KINDS = 3 } skv_niah_kind;
#define SKV_NIAH_MAX_NEEDLES 8
#define SKV_NIAH_VALUE_DIGITS 7

/* "single", "multikey", "multivalue"; parse: the kind, or -1 for an unknown name */
const char *skv_niah_kind_name(skv_niah_kind k);
int skv_niah_kind_parse(const char *s);

/* One built unit. Needles are listed in prompt order of construction: needles 0 .. n_gold-1
 * hold the asked values (single, multikey: needle 0; multivalue: all). */
typedef struct {
    skv_niah_kind kind;
    int n_needles, n_gold;
    char query[64];                                     /* the asked key */
    char keys[SKV_NIAH_MAX_NEEDLES][64];                /* each needle's key */
    char values[SKV_NIAH_MAX_NEEDLES][SKV_NIAH_VALUE_DIGITS + 1];
    int depth_pct[SKV_NIAH_MAX_NEEDLES];                /* requested depth of each needle */
    int pos[SKV_NIAH_MAX_NEEDLES];                      /* its first token in the prompt */
    int len[SKV_NIAH_MAX_NEEDLES];                      /* its tokens */
    int filler_before[SKV_NIAH_MAX_NEEDLES];            /* filler tokens before it */
    int body_start, n_filler;                           /* first haystack token; filler tokens used */
    int *prompt, n_prompt;                              /* heap; exactly the requested length */
} skv_niah_unit;

/* How the prompt is wrapped: pre (BOS, or a chat template's head up to the user text) and
 * mid (between the question and the answer prefix: the end of the user turn and the
 * assistant header; n_mid 0 for a plain prompt, where a space joins them). */
typedef struct {
    const int *pre; int n_pre;
    const int *mid; int n_mid;
} skv_niah_wrap;

/* Build a unit: kind, prompt length in tokens (the whole prompt, wrap included), depth of
 * the asked needle in percent of the haystack, needles (multikey / multivalue, 2..8; single:
 * ignored), seed (per unit). fill: tokenised pg-essays prose (n_fill tokens, no BOS), reused
 * across units. 0, or -1 + error (length too short for the template, filler too short, bad
 * arguments). */
int skv_niah_build(const skv_tokenizer *t, const int *fill, int n_fill, const skv_niah_wrap *wrap, skv_niah_kind kind,
                   int length, int depth_pct, int needles, unsigned seed, skv_niah_unit *u);
void skv_niah_free(skv_niah_unit *u);
/* Seed of unit (kind, length, depth, variant): a fixed hash */
unsigned skv_niah_seed(skv_niah_kind kind, int length, int depth_pct, int variant);
/* Generation stop for niah: u points to the number of asked values (int); stop once that
 * many complete runs of 7+ digits were generated, or at a blank line after some text. */
bool skv_niah_stop(const char *text, void *u);

/* ---- padding ---- */
/* Token ids of the first n tokens (n <= n_fill) of fill as text (heap), for a pad. */
char *skv_pad_text(const skv_tokenizer *t, const int *fill, int n);

/* ---- LongBench ---- */
/* Python str.format of tmpl with the string fields of the JSON object rec ("{{" and "}}" are
 * braces). Heap, NULL + error (a field missing or not a string, a stray brace). */
char *skv_format_fields(const char *tmpl, const cJSON *rec);
/* The records of <data_dir>/longbench/<subset>.jsonl as a cJSON array (file order), the
 * subset's template and generation length from dataset2prompt.json / dataset2maxlen.json.
 * NULL + error. */
cJSON *skv_longbench_load(const char *data_dir, const char *subset, char **tmpl, int *max_gen);
/* pred.py's truncation: ids[0..n) unchanged when n <= max_length, else its first and last
 * half = max_length / 2 tokens. out: capacity n. The count written. */
int skv_truncate_middle(const int *ids, int n, int max_length, int *out);
/* The LongBench prompt of a formatted record: tokenised (BOS when the tokenizer adds one, as
 * the HF tokenizer does), truncated in the middle to max_length tokens, the two halves
 * decoded without special tokens and concatenated. Heap text; *n_full the tokens before
 * truncation. NULL + error. */
char *skv_longbench_truncate(const skv_tokenizer *t, const char *prompt, int max_length, int *n_full);

#endif
