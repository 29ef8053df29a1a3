/* eval_shards.c: the shard files of a sharded `smallkv-mpi eval` run (RESULTS.json.rankK):
 * finding them and merging them into RESULTS.json in the order one process would have written. */
#include "runtime/cli/eval_cfg.h"
#include "common/util.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* The shard files of out (out.rankK, K digits), sorted by K; *names heap (each heap). */
int eval_shard_files(const char *out, char ***names) {
    *names = NULL;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : out;
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    if (slash && slash == dir) snprintf(dir, sizeof dir, "/");
    char pre[4200];
    snprintf(pre, sizeof pre, "%s.rank", base);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    long *ranks = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const size_t l = strlen(pre);
        if (strncmp(e->d_name, pre, l) || !e->d_name[l]) continue;
        const char *k = e->d_name + l;
        if (strspn(k, "0123456789") != strlen(k) || strlen(k) > 9) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            char **nn = realloc(*names, (size_t)cap * sizeof *nn);
            long *nr = realloc(ranks, (size_t)cap * sizeof *nr);
            if (nn) *names = nn;
            if (nr) ranks = nr;
            if (!nn || !nr) break;
        }
        char path[8400];
        snprintf(path, sizeof path, "%s%s%s", slash ? dir : "", slash ? (strcmp(dir, "/") ? "/" : "") : "", e->d_name);
        if (!((*names)[n] = skv_strdup(path))) break;
        ranks[n++] = atol(k);
    }
    closedir(d);
    for (int i = 1; i < n; i++)   /* by rank */
        for (int j = i; j > 0 && ranks[j] < ranks[j - 1]; j--) {
            long r = ranks[j]; ranks[j] = ranks[j - 1]; ranks[j - 1] = r;
            char *t = (*names)[j]; (*names)[j] = (*names)[j - 1]; (*names)[j - 1] = t;
        }
    free(ranks);
    return n;
}

void eval_free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Fold the shard files into out's records: the records of unit order[0], then order[1], ...
 * (each from every shard, shards by rank, within a shard in its order), then any others, a
 * later key replacing an earlier one; out is saved atomically, then the shard files are
 * removed (all stay when one cannot be read). 0 or -1 + error. */
int eval_merge_shards(const char *out, char *const *order, int n_order, int *merged_records) {
    char **names = NULL;
    const int ns = eval_shard_files(out, &names);
    *merged_records = 0;
    if (ns <= 0) { eval_free_names(names, ns > 0 ? ns : 0); return 0; }
    skv_eval_store *m = skv_store_open(NULL), *prev = access(out, F_OK) == 0 ? skv_store_load(out) : NULL;
    skv_eval_store **sh = skv_calloc((size_t)ns, sizeof *sh, "shards");
    int rc = -1;
    if (!m || !sh || (access(out, F_OK) == 0 && !prev)) goto done;
    if (prev && skv_store_merge(m, prev)) goto done;
    for (int i = 0; i < ns; i++)
        if (!(sh[i] = skv_store_load(names[i]))) goto done;
    /* taken[i][j]: record j of shard i is in m already */
    for (int u = 0; u <= n_order; u++) {
        for (int i = 0; i < ns; i++) {
            cJSON *r;
            cJSON_ArrayForEach(r, sh[i]->records) {
                if (cJSON_GetObjectItemCaseSensitive(r, "_merged")) continue;
                const char *key = cJSON_GetObjectItemCaseSensitive(r, "key")->valuestring;
                if (u < n_order && strncmp(key, order[u], strlen(order[u]))) continue;
                cJSON *dup = cJSON_Duplicate(r, 1);
                if (!dup || skv_store_add(m, dup)) goto done;
                cJSON_AddTrueToObject(r, "_merged");
                (*merged_records)++;
            }
        }
    }
    if (!(m->path = skv_strdup(out)) || skv_store_save(m)) goto done;
    for (int i = 0; i < ns; i++) unlink(names[i]);
    rc = 0;
done:
    if (rc) skv_error_prefix("merging the shard files of %s", out);
    if (sh) for (int i = 0; i < ns; i++) skv_store_free(sh[i]);
    free(sh);
    skv_store_free(prev);
    skv_store_free(m);
    eval_free_names(names, ns);
    return rc;
}
