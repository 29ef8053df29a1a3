/* pair.c: the public API's model pair (include/smallkv.h): loading the LLM and SLM, the
 * profile checked against both, the pair's uploads to a device, and the tokenizer. */
#include "api.h"
#include "runtime/model/fingerprint.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include <stdlib.h>
#include <string.h>

const char *smallkv_last_error(void) { return skv_last_error(); }

smallkv_pair *smallkv_pair_load(const char *llm_path, const char *slm_path) {
    if (!llm_path) { skv_error("smallkv_pair_load: no LLM path"); return NULL; }
    smallkv_pair *p = skv_calloc(1, sizeof *p, "model pair");
    if (!p) return NULL;
    if (!(p->llm = skv_model_load(llm_path))) goto fail;
    if (slm_path) {
        if (!(p->slm = skv_model_load(slm_path))) goto fail;
        if (p->slm->cfg.vocab != p->llm->cfg.vocab) {
            skv_error("%s: the SLM's vocabulary (%d) differs from the LLM's (%d, %s)", slm_path, p->slm->cfg.vocab,
                      p->llm->cfg.vocab, llm_path);
            goto fail;
        }
    }
    return p;
fail:
    smallkv_pair_free(p);
    return NULL;
}

smallkv_pair *api_pair_borrow(const skv_model *llm, const skv_model *slm) {
    if (!llm) { skv_error("api_pair_borrow: no LLM"); return NULL; }
    smallkv_pair *p = skv_calloc(1, sizeof *p, "model pair");
    if (!p) return NULL;
    /* the API never writes a model (device uploads are copies kept in the pair) */
    p->llm = (skv_model *)llm;
    p->slm = (skv_model *)slm;
    p->borrowed = true;
    return p;
}

int smallkv_pair_load_profile(smallkv_pair *p, const char *path) {
    if (!p || !path) return skv_error("smallkv_pair_load_profile: bad arguments");
    if (!p->slm) return skv_error("%s: a profile needs an SLM (load the pair with one)", path);
    skv_profile *pr = skv_profile_load(path);
    if (!pr) return -1;
    skv_model_fp fs, fl;
    if (skv_fp_from_model(p->slm, false, &fs) || skv_fp_from_model(p->llm, false, &fl) ||
        skv_profile_check_models(pr, &fs, &fl)) {
        skv_profile_free(pr);
        return -1;
    }
    const int n = p->llm->cfg.n_layer * p->llm->cfg.n_head, ns = p->slm->cfg.n_layer * p->slm->cfg.n_head;
    if (pr->n_llm != n || pr->n_slm != ns) {
        skv_profile_free(pr);
        return skv_error("%s: head counts %d/%d do not match the models (%d/%d)", path, pr->n_llm, pr->n_slm, n, ns);
    }
    int *map = skv_malloc((size_t)n * sizeof(int), "profile map");
    if (!map) { skv_profile_free(pr); return -1; }
    for (int i = 0; i < n; i++) {
        if (pr->map[i] < 0 || pr->map[i] >= ns) {
            free(map);
            skv_profile_free(pr);
            return skv_error("%s: map entry %d = %d out of range", path, i, (int)pr->map[i]);
        }
        map[i] = pr->map[i];
    }
    skv_profile_free(p->prof);
    free(p->map);
    p->prof = pr;
    p->map = map;
    return 0;
}

int api_pair_upload(smallkv_pair *p, const skv_backend *be) {
    if (p->dev == be) return 0;
    if (p->dev) {
        p->dev->release(p->dev_slm);
        p->dev->release(p->dev_llm);
        p->dev = NULL;
        p->dev_llm = p->dev_slm = NULL;
    }
    if (!(p->dev_llm = be->upload(p->llm))) return skv_error_prefix("device %s: LLM", be->name);
    if (p->slm && !(p->dev_slm = be->upload(p->slm))) {
        be->release(p->dev_llm);
        p->dev_llm = NULL;
        return skv_error_prefix("device %s: SLM", be->name);
    }
    p->dev = be;
    return 0;
}

void smallkv_pair_free(smallkv_pair *p) {
    if (!p) return;
    if (p->dev) {
        p->dev->release(p->dev_slm);
        p->dev->release(p->dev_llm);
    }
    if (!p->borrowed) {
        skv_model_free(p->llm);
        skv_model_free(p->slm);
    }
    skv_profile_free(p->prof);
    free(p->map);
    free(p);
}

int smallkv_vocab(const smallkv_pair *p) { return p->llm->cfg.vocab; }
int smallkv_context_length(const smallkv_pair *p) { return p->llm->cfg.ctx_max; }

/* tokenise text (already rendered by the chat template when chat) */
static int tokenize_text(const smallkv_pair *p, char *t, bool chat, int flags, int *ids, int cap) {
    const skv_tokenizer *tok = p->llm->tok;
    const int bos = (!chat && (flags & SMALLKV_TOK_BOS) && skv_tok_add_bos(tok) && skv_tok_bos(tok) >= 0) ? 1 : 0;
    int need = skv_tokenize(tok, t, strlen(t), chat, NULL, 0);
    if (need >= 0 && ids && cap > 0) {
        if (bos) ids[0] = skv_tok_bos(tok);
        if (cap > bos) {
            int *tmp = skv_malloc(((size_t)need + 1) * sizeof(int), "token ids");
            if (!tmp) need = -1;
            else if (skv_tokenize(tok, t, strlen(t), chat, tmp, need) != need) need = skv_error("tokenizer: inconsistent counts");
            else memcpy(ids + bos, tmp, (size_t)(need < cap - bos ? need : cap - bos) * sizeof(int));
            free(tmp);
        }
    }
    free(t);
    return need < 0 ? -1 : need + bos;
}

static int tokenize(const smallkv_pair *p, const char *system, const char *text, int flags, int *ids, int cap) {
    if (!p || !text || cap < 0) return skv_error("smallkv_tokenize: bad arguments");
    const skv_tokenizer *tok = p->llm->tok;
    if (!tok) return skv_error("%s: the model has no tokenizer", p->llm->path ? p->llm->path : "LLM");
    const bool chat = flags & SMALLKV_TOK_CHAT;
    char *t = chat ? skv_chat_prompt(tok, system, text) : skv_strdup(text);
    if (!t) return -1;
    return tokenize_text(p, t, chat, flags, ids, cap);
}

int smallkv_tokenize(const smallkv_pair *p, const char *text, int flags, int *ids, int cap) {
    return tokenize(p, NULL, text, flags, ids, cap);
}

int smallkv_tokenize_chat(const smallkv_pair *p, const char *system, const char *user, int *ids, int cap) {
    return tokenize(p, system, user, SMALLKV_TOK_CHAT, ids, cap);
}

int smallkv_tokenize_messages(const smallkv_pair *p, const smallkv_message *msgs, int n, int *ids, int cap) {
    if (!p || !msgs || n < 1 || cap < 0) return skv_error("smallkv_tokenize_messages: no messages");
    const skv_tokenizer *tok = p->llm->tok;
    if (!tok) return skv_error("%s: the model has no tokenizer", p->llm->path ? p->llm->path : "LLM");
    const char **roles = skv_malloc(2 * (size_t)n * sizeof(char *), "messages");
    if (!roles) return -1;
    const char **contents = roles + n;
    for (int i = 0; i < n; i++) { roles[i] = msgs[i].role; contents[i] = msgs[i].content; }
    char *t = skv_chat_render(tok, roles, contents, n);
    free(roles);
    if (!t) return -1;
    return tokenize_text(p, t, true, 0, ids, cap);
}

const char *smallkv_token_bytes(const smallkv_pair *p, int id, size_t *len) {
    if (!p->llm->tok) { if (len) *len = 0; return NULL; }
    return skv_token_bytes(p->llm->tok, id, len);
}

int smallkv_is_stop(const smallkv_pair *p, int id) { return p->llm->tok && skv_tok_is_stop(p->llm->tok, id); }

