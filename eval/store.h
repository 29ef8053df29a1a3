/* store.h: the evaluation's results file: a JSON object {"format": "smallkv-eval",
 * "version": 1, "records": [...]}, one record per evaluated unit (a cell of the grid on one
 * document / context / problem), each with a unique "key" string that names everything
 * that determines its result (task, unit, policy spec, budget, models, settings).
 * Written incrementally: every add rewrites the whole file atomically (temp file + rename),
 * so an interrupted run leaves a valid file and a rerun skips the keys already present. */
#ifndef SKV_EVAL_STORE_H
#define SKV_EVAL_STORE_H
#include <stdbool.h>
#include <cJSON.h>

typedef struct {
    char *path;           /* NULL: in memory only (report merges) */
    cJSON *root;          /* owns everything */
    cJSON *records;       /* root's "records" array */
} skv_eval_store;

/* Open path: load it when it exists (NULL + error if it is not a results file), else start
 * empty (nothing written until the first add). */
skv_eval_store *skv_store_open(const char *path);
/* Load an existing file only (NULL + error if missing or invalid). */
skv_eval_store *skv_store_load(const char *path);
void skv_store_free(skv_eval_store *s);
int skv_store_count(const skv_eval_store *s);
const cJSON *skv_store_find(const skv_eval_store *s, const char *key);
static inline bool skv_store_has(const skv_eval_store *s, const char *key) { return skv_store_find(s, key) != NULL; }
/* Take ownership of rec (an object with a string "key"), replacing a record with the same
 * key, then save (when path is set). -1 + error (rec is freed either way). */
int skv_store_add(skv_eval_store *s, cJSON *rec);
int skv_store_save(const skv_eval_store *s);
/* Append copies of src's records to dst (later keys replace earlier ones). */
int skv_store_merge(skv_eval_store *dst, const skv_eval_store *src);

#endif
