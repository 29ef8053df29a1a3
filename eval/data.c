/* data.c: deterministic evaluation inputs from the shared data folder (data.h). */
#include "data.h"
#include "metrics.h"
#include "common/util.h"
#include <cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int skv_eval_tokenize(const skv_tokenizer *t, const char *text, size_t len, bool bos, int **out) {
    int n = skv_tokenize(t, text, len, false, NULL, 0);
    if (n < 0) return -1;
    const int b = bos && skv_tok_bos(t) >= 0 ? 1 : 0;
    int *ids = skv_malloc(((size_t)n + b + 1) * sizeof(int), "token ids");
    if (!ids) return -1;
    if (b) ids[0] = skv_tok_bos(t);
    if (skv_tokenize(t, text, len, false, ids + b, n) != n) { free(ids); return skv_error("tokenizer: inconsistent counts"); }
    *out = ids;
    return n + b;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *pg_essays(const char *dir, size_t *len) {
    DIR *d = opendir(dir);
    if (!d) { skv_error("%s: cannot open the pg-essays folder", dir); return NULL; }
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".txt")) names[n++] = skv_strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    char *all = NULL;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%.4000s/%.256s", dir, names[i] ? names[i] : "");
        size_t l;
        char *t = names[i] ? skv_read_file(path, &l) : NULL;
        free(names[i]);
        if (!t) continue;
        char *na = realloc(all, total + l + 3);
        if (!na) { free(t); continue; }
        all = na;
        memcpy(all + total, t, l);
        total += l;
        memcpy(all + total, "\n\n", 3);
        total += 2;
        free(t);
    }
    if (!all) { skv_error("%s: no readable *.txt files", dir); return NULL; }
    *len = total;
    return all;
}

/* LongBench multi_news: every record's "context" (its news passages) in file order, the
 * dataset's NEWLINE_CHAR markers as newlines, records separated by a blank line. */
static char *multi_news(const char *path, size_t *len) {
    size_t n;
    char *raw = skv_read_file(path, &n);
    if (!raw) return NULL;
    char *all = skv_malloc(n + 1, "multi_news corpus");
    if (!all) { free(raw); return NULL; }
    size_t total = 0;
    int recs = 0, line_no = 0;
    for (char *line = raw, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        if (!*line) continue;
        cJSON *j = cJSON_Parse(line);
        const cJSON *c = j ? cJSON_GetObjectItemCaseSensitive(j, "context") : NULL;
        if (!cJSON_IsString(c)) {
            cJSON_Delete(j);
            free(raw); free(all);
            skv_error("%s: line %d is not a record with a \"context\" string", path, line_no);
            return NULL;
        }
        static const char mark[] = " NEWLINE_CHAR ";
        for (const char *q = c->valuestring; *q;) {
            if (!strncmp(q, mark, sizeof mark - 1)) { all[total++] = '\n'; q += sizeof mark - 1; continue; }
            if (!strncmp(q, "NEWLINE_CHAR", 12)) { all[total++] = '\n'; q += 12; continue; }
            if (total + 3 > n) break;   /* the text only shrinks (a JSON escape is >= its byte) */
            all[total++] = *q++;
        }
        if (total + 2 <= n) { all[total++] = '\n'; all[total++] = '\n'; }
        recs++;
        cJSON_Delete(j);
    }
    free(raw);
    if (!recs) { free(all); skv_error("%s: no records", path); return NULL; }
    all[total] = 0;
    *len = total;
    return all;
}

int skv_eval_need(const char *data_dir, const char *set) {
    static const struct { const char *set, *file, *fetch; } need[] = {
        {"wikitext2", "wikitext2/wiki.test.raw", "wikitext2"},
        {"pg-essays", "pg-essays/addiction.txt", "pg-essays"},
        {"multi_news", "longbench/multi_news.jsonl", "longbench"},
        {"gsm8k", "gsm8k/test.jsonl", "gsm8k"},
        {"gsm8k", "gsm8k/train.jsonl", "gsm8k"},
        {"bbh", "bbh/bbh", "bbh"},
        {"bbh", "bbh/cot-prompts", "bbh"},
    };
    bool known = false;
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        if (strcmp(need[i].set, set)) continue;
        known = true;
        char path[4400];
        snprintf(path, sizeof path, "%.4000s/%s", data_dir, need[i].file);
        if (access(path, R_OK))
            return skv_error("data set '%s' not found (%s): get it with `scripts/fetch-data.sh %s` (or `make data`), "
                             "or point --data / SKV_DATA_DIR at a folder that has it", set, path, need[i].fetch);
    }
    return known ? 0 : skv_error("unknown data set '%s'", set);
}

char *skv_eval_corpus(const char *data_dir, const char *name, size_t *len) {
    char path[4096];
    if (strlen(data_dir) > 3900) { skv_error("data folder path too long"); return NULL; }
    if ((!strcmp(name, "wikitext2") || !strcmp(name, "pg-essays") || !strcmp(name, "multi_news")) &&
        skv_eval_need(data_dir, name))
        return NULL;
    if (!strcmp(name, "wikitext2")) {
        snprintf(path, sizeof path, "%s/wikitext2/wiki.test.raw", data_dir);
        return skv_read_file(path, len);
    }
    if (!strcmp(name, "pg-essays")) {
        snprintf(path, sizeof path, "%s/pg-essays", data_dir);
        return pg_essays(path, len);
    }
    if (!strcmp(name, "multi_news")) {
        snprintf(path, sizeof path, "%s/longbench/multi_news.jsonl", data_dir);
        return multi_news(path, len);
    }
    skv_error("unknown corpus '%s' (wikitext2, pg-essays, multi_news)", name);
    return NULL;
}

int skv_eval_document(const skv_tokenizer *t, const char *text, size_t len, int N, int idx, int **out) {
    const bool bos = skv_tok_add_bos(t) && skv_tok_bos(t) >= 0;
    const size_t need = (size_t)N * (size_t)(idx + 1);
    size_t use = need * 8 + 4096;
    for (;;) {
        if (use > len) use = len;
        int *ids = NULL;
        int n = skv_eval_tokenize(t, text, use, false, &ids);
        if (n < 0) return -1;
        if ((size_t)n >= need + 16 || use == len) {
            if ((size_t)n < need) { free(ids); return skv_error("corpus has %d tokens, document %d of %d tokens needs %zu", n, idx, N, need); }
            int *doc = skv_malloc((size_t)N * sizeof(int), "document");
            if (!doc) { free(ids); return -1; }
            int o = 0;
            if (bos) doc[o++] = skv_tok_bos(t);
            memcpy(doc + o, ids + (size_t)idx * N, (size_t)(N - o) * sizeof(int));
            free(ids);
            *out = doc;
            return N;
        }
        free(ids);
        use *= 2;
    }
}

/* ------------------------------------------------------------------ passkey */

int skv_passkey_key(int length, int depth_pct, unsigned seed) {
    unsigned x = seed * 2654435761u ^ (unsigned)length * 40503u ^ (unsigned)depth_pct * 2246822519u;
    x ^= x >> 15; x *= 2246822507u; x ^= x >> 13; x *= 3266489917u; x ^= x >> 16;
    return 10000 + (int)(x % 90000);
}

static const char *PK_INTRO =
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n\n";
/* Needle = before + key + after. Phrasing 0 is the original wording: results files written
 * before the variants existed keep meaning the same units. The others vary the words the
 * model has to match between needle and question, the answer stays the first digits. */
static const struct { const char *before, *after, *question; } PK_PHRASES[SKV_PASSKEY_PHRASINGS] = {
    {" The pass key is ", ". Remember it. ", "\n\nWhat is the pass key? The pass key is"},
    {" Note: the secret code is ", ". Keep it in mind. ", "\n\nWhat is the secret code? The secret code is"},
    {" My locker number is ", "; I must not forget it. ", "\n\nWhat is my locker number? My locker number is"},
};

int skv_passkey_build(const skv_tokenizer *t, const char *filler, size_t filler_len, int length, int depth_pct,
                      int key, int phrasing, int **ctx, int *n_ctx, int **q, int *n_q) {
    if (phrasing < 0 || phrasing >= SKV_PASSKEY_PHRASINGS)
        return skv_error("passkey: phrasing %d out of range (0..%d)", phrasing, SKV_PASSKEY_PHRASINGS - 1);
    char needle[128];
    snprintf(needle, sizeof needle, "%s%d%s", PK_PHRASES[phrasing].before, key, PK_PHRASES[phrasing].after);
    const char *question = PK_PHRASES[phrasing].question;
    int *intro = NULL, *nd = NULL, *fill = NULL, *out = NULL;
    int ni = skv_eval_tokenize(t, PK_INTRO, strlen(PK_INTRO), skv_tok_add_bos(t), &intro);
    int nn = ni < 0 ? -1 : skv_eval_tokenize(t, needle, strlen(needle), false, &nd);
    size_t use = (size_t)length * 8 + 4096;
    if (use > filler_len) use = filler_len;
    int nf = nn < 0 ? -1 : skv_eval_tokenize(t, filler, use, false, &fill);
    int rc = -1;
    if (nf < 0) goto done;
    int want = length - ni - nn;
    if (want < 1 || nf < want) { skv_error("passkey: filler too short for %d tokens", length); goto done; }
    int at = (int)((long)want * depth_pct / 100);
    /* move to just after a sentence end */
    while (at < want) {
        size_t bl;
        const char *b = skv_token_bytes(t, fill[at > 0 ? at - 1 : 0], &bl);
        if (at == 0 || (b && bl && memchr(b, '.', bl))) break;
        at++;
    }
    if (!(out = skv_malloc((size_t)length * sizeof(int), "passkey context"))) goto done;
    int o = 0;
    memcpy(out + o, intro, (size_t)ni * sizeof(int)); o += ni;
    memcpy(out + o, fill, (size_t)at * sizeof(int)); o += at;
    memcpy(out + o, nd, (size_t)nn * sizeof(int)); o += nn;
    memcpy(out + o, fill + at, (size_t)(want - at) * sizeof(int)); o += want - at;
    int nq = skv_eval_tokenize(t, question, strlen(question), false, q);
    if (nq < 0) goto done;
    *ctx = out; out = NULL;
    *n_ctx = o;
    *n_q = nq;
    rc = 0;
done:
    free(intro); free(nd); free(fill); free(out);
    return rc;
}

/* ------------------------------------------------------------------ gsm8k */

int skv_gsm8k_parse(const char *line, size_t len, char **question, char **answer) {
    cJSON *j = cJSON_ParseWithLength(line, len);
    const cJSON *qq = j ? cJSON_GetObjectItemCaseSensitive(j, "question") : NULL;
    const cJSON *aa = j ? cJSON_GetObjectItemCaseSensitive(j, "answer") : NULL;
    if (!cJSON_IsString(qq) || !cJSON_IsString(aa)) { cJSON_Delete(j); return skv_error("gsm8k: a line without question/answer"); }
    *question = skv_strdup(qq->valuestring);
    *answer = skv_strdup(aa->valuestring);
    cJSON_Delete(j);
    if (!*question || !*answer) { free(*question); free(*answer); return -1; }
    return 0;
}

/* Line i of a jsonl file: 0 (ok), 1 (past the end), -1. */
static int jsonl_line(const char *path, int i, char **q, char **a) {
    size_t len;
    char *text = skv_read_file(path, &len);
    if (!text) return -1;
    const char *p = text, *end = text + len;
    int k = 0, rc = 1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        if (e > p) {
            if (k == i) { rc = skv_gsm8k_parse(p, (size_t)(e - p), q, a); if (rc) skv_error_prefix("%s line %d", path, k + 1); break; }
            k++;
        }
        p = e + 1;
    }
    free(text);
    return rc;
}

/* Solution text without <<calculator>> annotations and without the "#### X" line. */
static char *clean_solution(const char *a) {
    char *o = skv_malloc(strlen(a) + 1, "gsm8k solution");
    if (!o) return NULL;
    size_t k = 0;
    for (const char *p = a; *p;) {
        if (p[0] == '<' && p[1] == '<') { const char *e = strstr(p, ">>"); if (e) { p = e + 2; continue; } }
        if (p[0] == '#' && p[1] == '#' && p[2] == '#' && p[3] == '#') break;
        o[k++] = *p++;
    }
    while (k && isspace((unsigned char)o[k - 1])) k--;
    o[k] = 0;
    return o;
}

char *skv_gsm8k_fewshot(const char *train_path, int shots) {
    size_t cap = 1, n = 0;
    char *out = skv_calloc(1, 1, "gsm8k prompt");
    for (int i = 0; out && i < shots; i++) {
        char *q = NULL, *a = NULL, gold[64];
        int rc = jsonl_line(train_path, i, &q, &a);
        if (rc) { free(out); if (rc > 0) skv_error("%s: fewer than %d problems", train_path, shots); return NULL; }
        char *sol = clean_solution(a);
        if (!sol || !skv_gsm8k_gold(a, gold, sizeof gold)) { free(q); free(a); free(sol); free(out); skv_error("%s: problem %d has no '####' answer", train_path, i); return NULL; }
        size_t need = strlen(q) + strlen(sol) + strlen(gold) + 64;
        char *no = realloc(out, cap + need);
        if (!no) { free(q); free(a); free(sol); free(out); skv_error("gsm8k: out of memory"); return NULL; }
        out = no; cap += need;
        n += (size_t)sprintf(out + n, "Question: %s\nAnswer: %s The answer is %s.\n\n", q, sol, gold);
        free(q); free(a); free(sol);
    }
    return out;
}

int skv_gsm8k_item(const char *test_path, int i, char **question, char **gold) {
    char *a = NULL;
    int rc = jsonl_line(test_path, i, question, &a);
    if (rc) return rc;
    char g[64];
    if (!skv_gsm8k_gold(a, g, sizeof g)) { free(a); free(*question); return skv_error("%s: problem %d has no '####' answer", test_path, i); }
    free(a);
    *gold = skv_strdup(g);
    return *gold ? 0 : -1;
}

bool skv_gsm8k_stop(const char *text, void *u) {
    (void)u;
    if (strstr(text, "Question:")) return true;
    const char *p = NULL, *s = text;
    while ((s = strstr(s, "answer is")) != NULL) { p = s; s += 9; }
    if (!p) return false;
    bool digit = false;
    for (p += 9; *p; p++) {
        if (isdigit((unsigned char)*p)) digit = true;
        else if (digit && (*p == '\n' || (*p == '.' && !isdigit((unsigned char)p[1]) && p[1]) || *p == ' ')) return true;
    }
    return false;
}

/* ------------------------------------------------------------------ few-shot turns */

static char *trimmed(const char *a, const char *b) {
    while (a < b && isspace((unsigned char)*a)) a++;
    while (b > a && isspace((unsigned char)b[-1])) b--;
    char *o = skv_malloc((size_t)(b - a) + 1, "chat turn");
    if (o) { memcpy(o, a, (size_t)(b - a)); o[b - a] = 0; }
    return o;
}

/* the next example's start at or after p: q_mark at the text's start or after a newline */
static const char *next_example(const char *text, const char *p, const char *q_mark) {
    for (const char *s = p; (s = strstr(s, q_mark)) != NULL; s++)
        if (s == text || s[-1] == '\n') return s;
    return NULL;
}

void skv_fewshot_turns_free(char **contents, int n) {
    for (int i = 0; contents && i < n; i++) free(contents[i]);
    free(contents);
}

int skv_fewshot_turns(const char *shots, const char *q_mark, const char *a_mark, const char *question,
                      char ***contents) {
    *contents = NULL;
    int k = 0;
    for (const char *s = shots; (s = next_example(shots, s, q_mark)) != NULL; s++) k++;
    char **o = skv_calloc((size_t)(2 * k + 1), sizeof(char *), "chat turns");
    if (!o) return -1;
    const char *first = next_example(shots, shots, q_mark);
    char *desc = trimmed(shots, first ? first : shots + strlen(shots));
    if (!desc) { free(o); return -1; }
    int n = 0;
    for (const char *s = first; s; n += 2) {
        const char *end = next_example(shots, s + 1, q_mark);
        if (!end) end = s + strlen(s);
        const char *a = strstr(s, a_mark);
        if (!a || a >= end) {
            skv_fewshot_turns_free(o, n);
            free(desc);
            return skv_error("few-shot example %d has no '%s'", n / 2, a_mark + (a_mark[0] == '\n'));
        }
        a += strlen(a_mark);
        o[n] = trimmed(s, a);
        o[n + 1] = trimmed(a, end);
        if (!o[n] || !o[n + 1]) { skv_fewshot_turns_free(o, n + 2); free(desc); return -1; }
        s = *end ? end : NULL;
    }
    o[n] = skv_strdup(question);
    if (!o[n]) { skv_fewshot_turns_free(o, n); free(desc); return -1; }
    n++;
    if (*desc) {
        /* the description opens the first user turn */
        const size_t l = strlen(desc) + 2 + strlen(o[0]) + 1;
        char *u = skv_malloc(l, "chat turn");
        if (!u) { skv_fewshot_turns_free(o, n); free(desc); return -1; }
        snprintf(u, l, "%s\n\n%s", desc, o[0]);
        free(o[0]);
        o[0] = u;
    }
    free(desc);
    *contents = o;
    return n;
}

/* ------------------------------------------------------------------ bbh */

char *skv_bbh_prompt(const char *data_dir, const char *task) {
    char path[4096];
    snprintf(path, sizeof path, "%s/bbh/cot-prompts/%s.txt", data_dir, task);
    size_t len;
    char *t = skv_read_file(path, &len);
    if (!t) return NULL;
    char *p = strstr(t, "-----\n");
    char *body = skv_strdup(p ? p + 6 : t);
    free(t);
    if (!body) return NULL;
    size_t l = strlen(body);
    while (l && isspace((unsigned char)body[l - 1])) body[--l] = 0;
    return body;
}

int skv_bbh_item(const char *data_dir, const char *task, int i, char **input, char **target) {
    char path[4096];
    snprintf(path, sizeof path, "%s/bbh/bbh/%s.json", data_dir, task);
    size_t len;
    char *t = skv_read_file(path, &len);
    if (!t) return -1;
    cJSON *j = cJSON_ParseWithLength(t, len);
    free(t);
    const cJSON *ex = j ? cJSON_GetObjectItemCaseSensitive(j, "examples") : NULL;
    if (!cJSON_IsArray(ex)) { cJSON_Delete(j); return skv_error("%s: no \"examples\" array", path); }
    if (i >= cJSON_GetArraySize(ex)) { cJSON_Delete(j); return 1; }
    const cJSON *e = cJSON_GetArrayItem(ex, i);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(e, "input"), *tg = cJSON_GetObjectItemCaseSensitive(e, "target");
    if (!cJSON_IsString(in) || !cJSON_IsString(tg)) { cJSON_Delete(j); return skv_error("%s: example %d lacks input/target", path, i); }
    *input = skv_strdup(in->valuestring);
    *target = skv_strdup(tg->valuestring);
    cJSON_Delete(j);
    return *input && *target ? 0 : -1;
}

bool skv_bbh_stop(const char *text, void *u) {
    (void)u;
    if (strstr(text, "\nQ:")) return true;
    const char *p = strstr(text, "So the answer is ");
    if (!p) return false;
    p += strlen("So the answer is ");
    size_t l = strlen(p);
    if (strchr(p, '\n') || strstr(p, ". ")) return true;
    return l > 0 && p[l - 1] == '.';
}
