/* store.c: the incrementally written, resumable results file (see store.h). */
#include "store.h"
#include "common/util.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static skv_eval_store *store_empty(const char *path) {
    skv_eval_store *s = skv_calloc(1, sizeof *s, "results store");
    if (!s) return NULL;
    if (path && !(s->path = skv_strdup(path))) { free(s); return NULL; }
    s->root = cJSON_CreateObject();
    if (!s->root) { skv_store_free(s); skv_error("results store: out of memory"); return NULL; }
    cJSON_AddStringToObject(s->root, "format", "smallkv-eval");
    cJSON_AddNumberToObject(s->root, "version", 1);
    s->records = cJSON_AddArrayToObject(s->root, "records");
    return s;
}

skv_eval_store *skv_store_load(const char *path) {
    size_t len;
    char *text = skv_read_file(path, &len);
    if (!text) return NULL;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root) { skv_error("%s: not valid JSON", path); return NULL; }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    cJSON *recs = cJSON_GetObjectItemCaseSensitive(root, "records");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "smallkv-eval") || !cJSON_IsArray(recs)) {
        cJSON_Delete(root);
        skv_error("%s: not a smallkv eval results file (needs \"format\": \"smallkv-eval\" and \"records\")", path);
        return NULL;
    }
    int i = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, recs) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(r, "key");
        if (!cJSON_IsObject(r) || !cJSON_IsString(k)) {
            cJSON_Delete(root);
            skv_error("%s: record %d has no string \"key\"", path, i);
            return NULL;
        }
        i++;
    }
    skv_eval_store *s = skv_calloc(1, sizeof *s, "results store");
    if (!s || !(s->path = skv_strdup(path))) { free(s); cJSON_Delete(root); return NULL; }
    s->root = root;
    s->records = recs;
    return s;
}

skv_eval_store *skv_store_open(const char *path) {
    if (path && access(path, F_OK) == 0) return skv_store_load(path);
    return store_empty(path);
}

void skv_store_free(skv_eval_store *s) {
    if (!s) return;
    cJSON_Delete(s->root);
    free(s->path);
    free(s);
}

int skv_store_count(const skv_eval_store *s) { return cJSON_GetArraySize(s->records); }

static int find_index(const skv_eval_store *s, const char *key) {
    int i = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, s->records) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(r, "key");
        if (cJSON_IsString(k) && !strcmp(k->valuestring, key)) return i;
        i++;
    }
    return -1;
}

const cJSON *skv_store_find(const skv_eval_store *s, const char *key) {
    int i = find_index(s, key);
    return i < 0 ? NULL : cJSON_GetArrayItem(s->records, i);
}

int skv_store_save(const skv_eval_store *s) {
    if (!s->path) return 0;
    char *text = cJSON_Print(s->root);
    if (!text) return skv_error("%s: cannot serialise the results", s->path);
    size_t n = strlen(text);
    int rc = skv_write_file_atomic(s->path, text, n);
    free(text);
    return rc;
}

static int add_nosave(skv_eval_store *s, cJSON *rec) {
    const cJSON *k = rec ? cJSON_GetObjectItemCaseSensitive(rec, "key") : NULL;
    if (!cJSON_IsString(k)) { cJSON_Delete(rec); return skv_error("results store: record without a key"); }
    int i = find_index(s, k->valuestring);
    if (i >= 0) cJSON_ReplaceItemInArray(s->records, i, rec);
    else cJSON_AddItemToArray(s->records, rec);
    return 0;
}

int skv_store_add(skv_eval_store *s, cJSON *rec) {
    if (add_nosave(s, rec)) return -1;
    return skv_store_save(s);
}

int skv_store_merge(skv_eval_store *dst, const skv_eval_store *src) {
    const cJSON *r;
    cJSON_ArrayForEach(r, src->records) {
        cJSON *c = cJSON_Duplicate(r, 1);
        if (!c) return skv_error("results store: out of memory");
        if (add_nosave(dst, c)) return -1;
    }
    return 0;
}
