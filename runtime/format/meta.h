/* meta.h: what a calibration file (calibrate/calib.h) and a profile (profile.h) both record
 * about a model pair: the similarity metrics by name, each model's fingerprint (shapes,
 * tokenizer and weight hashes: runtime/model/fingerprint.h computes it from a loaded
 * model) and the calibration settings with the corpora's checksums, and their JSON forms
 * in the files' headers (profiles/FORMAT.md). */
#ifndef SKV_META_H
#define SKV_META_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SKV_META_MAX_HEADS (1 << 16)     /* L * H of a model a file may describe */
#define SKV_CALIB_MAX_WINDOWS (1 << 22)  /* 2^22 windows * 2^40 fits int64: sums cannot overflow */
#define SKV_CALIB_MAX_CORPORA 16

typedef enum { SKV_METRIC_JACCARD = 0, SKV_METRIC_COSINE = 1, SKV_METRIC_ROWCOS = 2, SKV_METRIC_COUNT = 3 } skv_metric;
#define SKV_METRIC_BIT(m) (1u << (m))

const char *skv_metric_name(int m);          /* "jaccard", "cosine", "rowcos" */
int skv_metric_parse(const char *name);      /* -1 if unknown */

/* What identifies a model: shapes, tokenizer and weights. `name` is informational only. */
typedef struct {
    char arch[16];            /* "llama", "qwen2" */
    char name[128];
    int n_layer, n_head, n_kv_head, head_dim, dim, vocab;
    char tokenizer_hash[72];  /* lowercase hex */
    char weight_hash[72];     /* lowercase hex */
} skv_model_fp;

/* Compare two fingerprints; 0 if equal, else -1 and `why` says which field differs. */
int skv_fp_diff(const skv_model_fp *a, const skv_model_fp *b, char *why, size_t why_len);

/* A corpus name: 1..SKV_CORPUS_NAME_MAX of [A-Za-z0-9._+-], not "." or "..". */
#define SKV_CORPUS_NAME_MAX 64
bool skv_corpus_name_ok(const char *name);

typedef struct {
    char name[256];           /* label ("wikitext2", "wiki.test.raw"), never a path; files
                                 written before names were checked may hold a path */
    char sha256[65];
    int64_t bytes;
} skv_corpus_info;

typedef struct {
    int window;               /* W: tokens per window */
    int windows_planned;      /* windows the whole (all-shard) run covers */
    int topk;                 /* K of jaccard_K */
    int sinks;                /* keys dropped before comparing */
    bool normalized;          /* F divided by the rows that could see each key */
    int last_rows;            /* rowcos: number of last query rows averaged (1 = last row) */
    unsigned metrics;         /* SKV_METRIC_BIT mask, at least one */
    uint64_t seed;
    int shard_count;          /* N of shard i/N */
    int n_corpora;
    skv_corpus_info corpora[SKV_CALIB_MAX_CORPORA];
} skv_calib_settings;

/* Non-empty and every character a hex digit. */
int skv_meta_is_hex(const char *s);

/* JSON helpers shared with the profile format (cJSON objects passed as void*). */
void *skv_fp_to_json(const skv_model_fp *fp);
int skv_fp_from_json(const void *obj, skv_model_fp *fp, const char *path, const char *which);
void *skv_settings_to_json(const skv_calib_settings *s);
int skv_settings_from_json(const void *obj, skv_calib_settings *s, const char *path);

#endif
