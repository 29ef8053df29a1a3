/* tokenizer_json.c: loads a Hugging Face tokenizer.json (byte-level BPE only) plus, when
 * present, the tokenizer_config.json beside it (chat_template, bos/eos, add_bos_token).
 *
 * The pre-tokenizer is recognised from its structure:
 *   Sequence[Split(Regex=<qwen2 regex>, Isolated), ByteLevel(use_regex=false)] -> qwen2
 *   Sequence[Digits(individual_digits=true), ByteLevel(use_regex=true)]        -> smollm
 *   ByteLevel(use_regex=true)                                                  -> gpt2
 * Anything else is refused. Normalizer: none, or NFC (accepted but NOT applied, like
 * llama.cpp; only text that is not already NFC tokenizes differently). */
#include "tokenizer_internal.h"
#include "common/util.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static int jtype_is(const cJSON *o, const char *type) {
    const char *t = jstr(o, "type");
    return t && !strcmp(t, type);
}
/* bool field with a default when absent; -1 when present but not a bool */
static int jbool(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return dflt;
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

static int byte_level_ok(const cJSON *bl, int want_regex) {
    return jtype_is(bl, "ByteLevel") && jbool(bl, "add_prefix_space", 0) == 0 &&
           jbool(bl, "use_regex", 1) == want_regex;
}

/* SKV_PRE_* from the pre_tokenizer object, -1 if unsupported. */
static int recognise_pretok(const cJSON *p) {
    if (byte_level_ok(p, 1)) return SKV_PRE_GPT2;
    if (!jtype_is(p, "Sequence")) return -1;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
    if (!cJSON_IsArray(seq) || cJSON_GetArraySize(seq) != 2) return -1;
    const cJSON *a = cJSON_GetArrayItem(seq, 0), *b = cJSON_GetArrayItem(seq, 1);
    if (jtype_is(a, "Digits") && jbool(a, "individual_digits", 0) == 1 && byte_level_ok(b, 1))
        return SKV_PRE_SMOLLM;
    if (jtype_is(a, "Split") && byte_level_ok(b, 0)) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(a, "pattern");
        const char *re = jstr(pat, "Regex"), *beh = jstr(a, "behavior");
        if (re && !strcmp(re, QWEN2_REGEX) && beh && !strcmp(beh, "Isolated") && jbool(a, "invert", 0) == 0)
            return SKV_PRE_QWEN2;
    }
    return -1;
}

/* id of a token given by its text (added tokens and raw vocabulary), -1 if absent */
static int find_text(const skv_tokenizer *t, const char *s) {
    size_t n = strlen(s);
    for (int id = 0; id < t->n_vocab; id++)
        if (t->tok[id] && t->tok_len[id] == n && !memcmp(t->tok[id], s, n)) return id;
    return -1;
}
static const char *token_field(const cJSON *cfg, const char *key) {   /* "x" or {"content": "x"} */
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) return jstr(v, "content");
    return NULL;
}

static int load_config(skv_tokenizer *t, const char *json_path) {
    const char *slash = strrchr(json_path, '/');
    size_t dl = slash ? (size_t)(slash - json_path + 1) : 0;
    char *cpath = skv_malloc(dl + 32, "path");
    if (!cpath) return -1;
    memcpy(cpath, json_path, dl);
    strcpy(cpath + dl, "tokenizer_config.json");
    size_t len;
    FILE *probe = fopen(cpath, "rb");
    if (!probe) { free(cpath); return 0; }     /* optional */
    fclose(probe);
    char *text = skv_read_file(cpath, &len);
    if (!text) { free(cpath); return -1; }
    cJSON *cfg = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(cfg)) {
        skv_error("%s: not a JSON object", cpath);
        cJSON_Delete(cfg); free(cpath);
        return -1;
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    const char *tmpl = cJSON_IsString(ct) ? ct->valuestring : NULL;
    if (cJSON_IsArray(ct)) {                   /* [{"name": "default", "template": ...}, ...] */
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const char *nm = jstr(e, "name");
            if (nm && !strcmp(nm, "default")) tmpl = jstr(e, "template");
        }
    }
    if (tmpl && !(t->chat_template = skv_strdup(tmpl))) { cJSON_Delete(cfg); free(cpath); return -1; }
    const char *bos = token_field(cfg, "bos_token"), *eos = token_field(cfg, "eos_token");
    if (bos) t->bos = find_text(t, bos);
    if (eos) t->eos = find_text(t, eos);
    int ab = jbool(cfg, "add_bos_token", 0);
    t->add_bos = ab == 1;
    cJSON_Delete(cfg);
    free(cpath);
    return 0;
}

static int fail(const char *path, const char *what) { return skv_error("%s: %s", path, what); }

/* max id over model.vocab and added_tokens, checking the shapes; -1 + error */
static long count_ids(const char *path, const cJSON *vocab, const cJSON *added) {
    long max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (1 << 26) ||
            e->valuedouble != (double)(long)e->valuedouble)
            return fail(path, "model.vocab: id is not an integer in [0, 2^26)");
        if (e->valueint > max_id) max_id = e->valueint;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 26) || !jstr(e, "content"))
            return fail(path, "added_tokens: entry without a valid id/content");
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (max_id < 0) return fail(path, "model.vocab is empty");
    return max_id;
}

static skv_tokenizer *from_doc(const char *path, const cJSON *doc) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(doc, "model");
    if (!cJSON_IsObject(model)) { fail(path, "no 'model' object"); return NULL; }
    if (jstr(model, "type") && !jtype_is(model, "BPE")) {
        skv_error("%s: model type '%s' is not supported (only BPE)", path, jstr(model, "type"));
        return NULL;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(doc, "added_tokens");
    if (!cJSON_IsObject(vocab)) { fail(path, "model.vocab missing or not an object"); return NULL; }
    if (!cJSON_IsArray(merges)) { fail(path, "model.merges missing or not an array"); return NULL; }
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added)) { fail(path, "added_tokens is not an array"); return NULL; }
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(doc, "normalizer");
    if (norm && !cJSON_IsNull(norm) && !jtype_is(norm, "NFC")) {
        skv_error("%s: normalizer '%s' is not supported", path, jstr(norm, "type") ? jstr(norm, "type") : "?");
        return NULL;
    }
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(doc, "pre_tokenizer");
    int kind = cJSON_IsObject(pt) ? recognise_pretok(pt) : -1;
    if (kind < 0) {
        fail(path, "pre_tokenizer is not supported (known: qwen2 Split+ByteLevel, smollm Digits+ByteLevel, ByteLevel)");
        return NULL;
    }
    long max_id = count_ids(path, vocab, cJSON_IsArray(added) ? added : NULL);
    if (max_id < 0) return NULL;
    skv_tokenizer *t = skv_tok_new((int)max_id + 1);
    if (!t) return NULL;
    t->pre = (skv_pretok_kind)kind;
    snprintf(t->pre_name, sizeof t->pre_name, "%s",
             kind == SKV_PRE_QWEN2 ? "qwen2" : kind == SKV_PRE_SMOLLM ? "smollm" : "gpt2");
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
        if (skv_tok_set_token(t, e->valueint, e->string, strlen(e->string), SKV_TOKT_NORMAL)) goto bad;
    if (cJSON_IsArray(added))
        cJSON_ArrayForEach(e, added) {
            const char *content = jstr(e, "content");
            int id = cJSON_GetObjectItemCaseSensitive(e, "id")->valueint;
            int type = jbool(e, "special", 0) == 1 ? SKV_TOKT_CONTROL : SKV_TOKT_USER;
            if (skv_tok_set_raw(t, id, content, strlen(content), type)) goto bad;
        }
    if (skv_tok_index_vocab(t)) goto bad;
    int r = 0;
    cJSON_ArrayForEach(e, merges) {
        const char *a, *b; size_t la, lb;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp) { skv_error("%s: merge %d '%s' has no space", path, r, e->valuestring); goto bad; }
            a = e->valuestring; la = (size_t)(sp - a); b = sp + 1; lb = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) && cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            a = cJSON_GetArrayItem(e, 0)->valuestring; la = strlen(a);
            b = cJSON_GetArrayItem(e, 1)->valuestring; lb = strlen(b);
        } else {
            skv_error("%s: merge %d is neither \"a b\" nor [a, b]", path, r);
            goto bad;
        }
        if (skv_tok_add_merge(t, a, la, b, lb)) { skv_error_prefix("%s", path); goto bad; }
        r++;
    }
    if (load_config(t, path)) goto bad;
    if (skv_tok_finish(t, path)) goto bad;
    return t;
bad:
    skv_tokenizer_free(t);
    return NULL;
}

skv_tokenizer *skv_tokenizer_from_json(const char *path) {
    if (!path) { skv_error("tokenizer: NULL path"); return NULL; }
    size_t len;
    char *text = skv_read_file(path, &len);
    if (!text) return NULL;
    cJSON *doc = cJSON_ParseWithLength(text, len);
    if (!doc) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= text && at <= text + len ? (long)(at - text) : -1;
        skv_error("%s: invalid JSON (near byte %ld)", path, off);
        free(text);
        return NULL;
    }
    free(text);
    skv_tokenizer *t = cJSON_IsObject(doc) ? from_doc(path, doc) : NULL;
    if (!cJSON_IsObject(doc)) skv_error("%s: not a JSON object", path);
    cJSON_Delete(doc);
    if (t) skv_clear_error();
    return t;
}
