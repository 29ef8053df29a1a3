/* eval_generate.c: the generation tasks of `smallkv eval`: passkey, gsm8k and bbh (optionally
 * padded or in the chat template), niah and longbench; each unit prefilled once and every
 * cell derived from it, scored against its reference. */
#include "runtime/cli/eval_cfg.h"
#include "runtime/cli/cli.h"
#include "eval/data.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* ------------------------------------------------------------------ generation tasks */

typedef struct { int n_digits; } pk_stop_u;
static bool passkey_stop(const char *text, void *u) {
    (void)u;
    const char *p = text;
    while (*p && !(*p >= '0' && *p <= '9')) p++;
    if (!*p) return false;
    while (*p >= '0' && *p <= '9') p++;
    return *p != 0;   /* a non-digit after the first number */
}

/* what a generation unit's output is scored against: passkey, gsm8k, bbh: gold; niah: the
 * asked values (recall); longbench: the reference answers (best ROUGE-L) */
enum { GEN_PASSKEY = 0, GEN_GSM8K = 1, GEN_BBH = 2, GEN_NIAH = 3, GEN_LONGBENCH = 4 };
typedef struct { const char *const *refs; int n_refs; } gen_refs;

/* Run every pending cell of one unit (same context for all: one shared prefill, decoded
 * together) and store records. */
static int gen_unit(eval_cfg *c, const char *unit, cJSON *unit_json, const int *ctx, int n_ctx, const int *q, int n_q,
                    int max_new, skv_eval_stop stop, void *stop_u, const char *gold, int kind, const gen_refs *refs) {
    skv_gen_cell cells[MAXL * MAXL / 4];
    char keys[MAXL * MAXL / 4][512];
    int n = 0, rc = CLI_OK;
    for (int p = 0; p < c->n_pols; p++) {
        const skv_eval_pol *pol = &c->pols[p];
        const double *bl;
        const int nb = eval_pol_budgets(c, pol, &bl);
        for (int b = 0; b < nb; b++) {
            if (n == (int)(sizeof cells / sizeof *cells)) break;
            eval_make_key(c, unit, pol, bl[b], keys[n], sizeof keys[n]);
            if (eval_have(c, keys[n])) { eval_skip_work(c, 1); continue; }
            memset(&cells[n], 0, sizeof cells[n]);
            cells[n].pol = pol;
            cells[n].budget = bl[b];
            n++;
        }
    }
    c->unit_name = unit;
    c->unit_work = n;
    const double t_unit = skv_now();
    if (n && (c->draft ? skv_eval_generate_draft(&c->ctx, cells, n, ctx, n_ctx, q, n_q, max_new, stop, stop_u, c->draft)
                       : skv_eval_generate_cells(&c->ctx, cells, n, ctx, n_ctx, q, n_q, max_new, stop, stop_u))) {
        cJSON_Delete(unit_json);
        return cli_fail(unit);
    }
    const double unit_s = skv_now() - t_unit;
    for (int i = 0; i < n; i++) {
        const skv_eval_pol *pol = cells[i].pol;
        skv_gen_out *g = &cells[i].out;
        char pred[256] = "";
        bool ok = false;
        double score = 0, rp = 0, rr = 0;
        if (kind == GEN_PASSKEY) { skv_first_digits(g->text, pred, sizeof pred); ok = !strcmp(pred, gold); }
        else if (kind == GEN_GSM8K) { skv_extract_gsm8k(g->text, pred, sizeof pred); ok = !strcmp(pred, gold); }
        else if (kind == GEN_BBH) { skv_extract_bbh(g->text, pred, sizeof pred); ok = skv_bbh_match(pred, gold); }
        else if (kind == GEN_NIAH) {
            score = skv_recall_values(g->text, refs->refs, refs->n_refs);
            ok = score == 1;
            size_t o = 0;   /* the asked values found, in the order asked */
            for (int k = 0; k < refs->n_refs; k++)
                if (strcasestr(g->text, refs->refs[k]) && o + strlen(refs->refs[k]) + 2 < sizeof pred)
                    o += (size_t)snprintf(pred + o, sizeof pred - o, "%s%s", o ? "," : "", refs->refs[k]);
        } else {   /* LongBench: the best ROUGE-L F over the answers */
            for (int k = 0; k < refs->n_refs; k++) {
                double f, pp, rr2;
                if (skv_rouge_l(g->text, refs->refs[k], &f, &pp, &rr2)) { rc = cli_fail(unit); f = pp = rr2 = 0; }
                if (k == 0 || f > score) { score = f; rp = pp; rr = rr2; }
            }
        }
        cJSON *r = eval_base_record(c, keys[i], pol, cells[i].budget, cJSON_Duplicate(unit_json, 1));
        cJSON *m = cJSON_AddObjectToObject(r, "metrics");
        if (kind == GEN_LONGBENCH) {
            cJSON_AddNumberToObject(m, "score", score);
            cJSON_AddNumberToObject(m, "rouge_l", score);
            cJSON_AddNumberToObject(m, "rouge_l_p", rp);
            cJSON_AddNumberToObject(m, "rouge_l_r", rr);
        } else {
            cJSON_AddBoolToObject(m, "correct", ok);
            if (kind == GEN_NIAH) { cJSON_AddNumberToObject(m, "score", score); cJSON_AddNumberToObject(m, "recall", score); }
            cJSON_AddStringToObject(m, "pred", pred);
            cJSON_AddStringToObject(m, "gold", gold);
        }
        cJSON_AddNumberToObject(m, "prompt_tokens", n_ctx + n_q);
        cJSON_AddNumberToObject(m, "generated_tokens", g->n_gen);
        cJSON_AddStringToObject(m, "output", g->text);
        eval_add_mem(r, &g->mem);
        cJSON_AddBoolToObject(r, "shared_prefill", cells[i].shared_prefill);
        cJSON_AddNumberToObject(r, "prefill_seconds", g->prefill_s);
        cJSON_AddNumberToObject(r, "decode_seconds_all_cells", g->decode_s);
        cJSON_AddNumberToObject(r, "cells_together", c->draft ? 1 : n);
        eval_add_unit_time(r, unit_s, n);
        if (c->draft) {
            cJSON *sp = cJSON_AddObjectToObject(r, "speculative");
            cJSON_AddNumberToObject(sp, "draft", c->draft);
            cJSON_AddNumberToObject(sp, "llm_passes", g->spec_passes);
            cJSON_AddNumberToObject(sp, "drafted", g->spec_drafted);
            cJSON_AddNumberToObject(sp, "accepted", g->spec_accepted);
            cJSON_AddNumberToObject(sp, "decode_seconds", g->decode_s);
        }
        c->work_done += 1;
        if (rc == CLI_OK && skv_store_add(c->store, r)) rc = cli_fail(NULL);
    }
    for (int i = 0; i < n; i++) free(cells[i].out.text);
    cJSON_Delete(unit_json);
    eval_show_progress(c, 0);
    return rc;
}

static int n_cells(const eval_cfg *c) {
    const skv_eval_pol *pl[MAXL];
    for (int p = 0; p < c->n_pols; p++) pl[p] = &c->pols[p];
    return eval_n_cells(c, pl, c->n_pols);
}

int eval_run_passkey(eval_cfg *c) {
    size_t len;
    char *filler = skv_eval_corpus(c->data_dir, "pg-essays", &len);
    if (!filler) return cli_fail(NULL);
    c->work_total = (double)c->n_lengths * c->n_depths * c->variants * n_cells(c);
    int rc = CLI_OK;
    for (int li = 0; li < c->n_lengths && rc == CLI_OK; li++)
        for (int di = 0; di < c->n_depths && rc == CLI_OK; di++)
            for (int v = 0; v < c->variants && rc == CLI_OK; v++) {
                int L = c->lengths[li], D = c->depths[di], key = skv_passkey_key(L, D, (unsigned)v + 1);
                /* variant 0 keeps the name (and unit JSON) of the single-variant runs, so their
                 * results files resume and their records still pair with new ones in reports */
                char unit[64], gold[16];
                if (v) snprintf(unit, sizeof unit, "len=%d,depth=%d,v=%d", L, D, v);
                else snprintf(unit, sizeof unit, "len=%d,depth=%d", L, D);
                const skv_eval_pol *pl[MAXL];
                if (!eval_take_unit(c, unit, pl, eval_grid_pols(c, pl), n_cells(c))) continue;
                int *ctx = NULL, *q = NULL, nc, nq;
                if (skv_passkey_build(c->llm->tok, filler, len, L, D, key, v % SKV_PASSKEY_PHRASINGS, &ctx, &nc, &q, &nq)) {
                    rc = cli_fail("passkey");
                    break;
                }
                snprintf(gold, sizeof gold, "%d", key);
                cJSON *uj = cJSON_CreateObject();
                cJSON_AddNumberToObject(uj, "length", L);
                cJSON_AddNumberToObject(uj, "depth", D);
                if (v) cJSON_AddNumberToObject(uj, "variant", v);   /* absent: variant 0 */
                cJSON_AddNumberToObject(uj, "context_tokens", nc);
                rc = gen_unit(c, unit, uj, ctx, nc, q, nq, c->max_new > 0 ? c->max_new : 8, passkey_stop, NULL, gold,
                              GEN_PASSKEY, NULL);
                free(ctx); free(q);
            }
    free(filler);
    return rc;
}

static char *concat3(const char *a, const char *b, const char *d) {
    size_t n = strlen(a) + strlen(b) + strlen(d) + 1;
    char *o = skv_malloc(n, "prompt");
    if (o) snprintf(o, n, "%s%s%s", a, b, d);
    return o;
}

/* gsm8k (kind 1) and bbh (kind 2): where a few-shot example's question starts and where its
 * answer starts (the answer mark ends the question's text) */
static const char *const QUESTION_MARK[3] = {"", "Question: ", "Q: "};
static const char *const ANSWER_MARK[3] = {"", "\nAnswer:", "\nA: Let's think step by step."};

/* A rendered chat text (heap, NULL after an error) as token ids, specials parsed; frees it.
 * The count (*ids heap), or -1 + error. */
static int encode_chat(const eval_cfg *c, char *chat, int **ids) {
    int n = chat ? skv_tokenize(c->llm->tok, chat, strlen(chat), true, NULL, 0) : -1;
    if (n > 0 && (*ids = skv_malloc((size_t)n * sizeof(int), "token ids")))
        n = skv_tokenize(c->llm->tok, chat, strlen(chat), true, *ids, n);
    else if (n > 0) n = -1;
    free(chat);
    return n;
}

/* A prompt text as token ids: plain (BOS when the tokenizer adds one), or with --chat as one
 * user turn of the model's chat template, the assistant's header last (specials parsed).
 * The count (*ids heap), or -1 + error. */
static int encode_prompt(const eval_cfg *c, const char *text, int **ids) {
    *ids = NULL;
    if (!c->chat) return skv_eval_tokenize(c->llm->tok, text, strlen(text), skv_tok_add_bos(c->llm->tok), ids);
    return encode_chat(c, skv_chat_prompt(c->llm->tok, NULL, text), ids);
}

/* --chat-turns: the few-shot text `shots` as user/assistant turns, then `question` (its
 * answer mark included) as the last user turn, the assistant's header last. Count (*ids heap),
 * or -1 + error. */
static int encode_turns(const eval_cfg *c, int kind, const char *shots, const char *question, int **ids) {
    *ids = NULL;
    char **turns = NULL;
    const int nt = skv_fewshot_turns(shots, QUESTION_MARK[kind], ANSWER_MARK[kind], question, &turns);
    if (nt < 0) return -1;
    const char **roles = skv_malloc((size_t)nt * sizeof(char *), "chat roles");
    char *chat = NULL;
    if (roles) {
        for (int i = 0; i < nt; i++) roles[i] = i % 2 ? "assistant" : "user";
        chat = skv_chat_render(c->llm->tok, roles, (const char *const *)turns, nt);
    }
    free(roles);
    skv_fewshot_turns_free(turns, nt);
    return encode_chat(c, chat, ids);
}

/* The tokens of pg-essays' first n_min tokens or more (no BOS), for padding and haystacks.
 * Count (*out heap), or -1 + error. */
static int filler_tokens(const eval_cfg *c, int n_min, int **out) {
    size_t len;
    char *text = skv_eval_corpus(c->data_dir, "pg-essays", &len);
    if (!text) return -1;
    size_t use = (size_t)n_min * 8 + 4096;
    if (use > len) use = len;
    int n = skv_eval_tokenize(c->llm->tok, text, use, false, out);
    free(text);
    if (n >= 0 && n < n_min) {
        free(*out);
        *out = NULL;
        return skv_error("pg-essays has %d tokens, %d needed", n, n_min);
    }
    return n;
}

/* --pad-to: pg-essays prose (its first k tokens as text), a blank line, then the prompt
 * text, k chosen so the encoded prompt has pad_to tokens (re-encoding can join tokens at the
 * seam: a few rounds, keeping the longest that fits). The prompt as encode_prompt gives it;
 * *pad the k used (0: the prompt alone is already that long). */
static int pad_prompt(const eval_cfg *c, const int *fill, int n_fill, const char *text, int **ids, int *pad) {
    *pad = 0;
    const int n0 = encode_prompt(c, text, ids);
    if (n0 < 0 || n0 >= c->pad_to) return n0;
    free(*ids);
    *ids = NULL;
    int k = c->pad_to - n0 - 1, best = -1;
    for (int round = 0; round < 8; round++) {
        if (k > n_fill) { free(*ids); *ids = NULL; return skv_error("--pad-to %d: pg-essays too short", c->pad_to); }
        char *p = skv_pad_text(c->llm->tok, fill, k), *full = p ? concat3(p, "\n\n", text) : NULL;
        int *t = NULL;
        const int n = full ? encode_prompt(c, full, &t) : -1;
        free(p); free(full);
        if (n < 0) { free(*ids); *ids = NULL; return -1; }
        if (n <= c->pad_to && n > best) { free(*ids); *ids = t; best = n; *pad = k; }
        else free(t);
        if (n == c->pad_to) break;
        k += c->pad_to - n;
        if (k < 0) k = 0;
    }
    if (best < 0) return skv_error("--pad-to %d: no padding fits", c->pad_to);
    return best;
}

int eval_run_text_task(eval_cfg *c, int kind) {
    char path[4400];
    int rc = CLI_OK;
    const int limit = c->limit > 0 ? c->limit : (kind == 1 ? 20 : 10);
    const int ntask = kind == 1 ? 1 : c->n_bbh;
    c->work_total = (double)limit * ntask * n_cells(c);
    char *shots = NULL;
    int *fill = NULL, n_fill = 0;
    if (skv_eval_need(c->data_dir, kind == 1 ? "gsm8k" : "bbh")) return cli_fail(NULL);
    if (c->pad_to && (n_fill = filler_tokens(c, c->pad_to, &fill)) < 0) return cli_fail("--pad-to");
    if (kind == 1) {
        snprintf(path, sizeof path, "%.4000s/gsm8k/train.jsonl", c->data_dir);
        if (!(shots = skv_gsm8k_fewshot(path, 4))) { free(fill); return cli_fail(NULL); }
        snprintf(path, sizeof path, "%.4000s/gsm8k/test.jsonl", c->data_dir);
    }
    const skv_eval_pol *pl[MAXL];
    const int npl = eval_grid_pols(c, pl);
    for (int t = 0; t < ntask && rc == CLI_OK; t++) {
        if (kind == 2 && !(shots = skv_bbh_prompt(c->data_dir, c->bbh_tasks[t]))) { free(fill); return cli_fail(NULL); }
        for (int i = 0; i < limit && rc == CLI_OK; i++) {
            char *in = NULL, *gold = NULL;
            int r = kind == 1 ? skv_gsm8k_item(path, i, &in, &gold) : skv_bbh_item(c->data_dir, c->bbh_tasks[t], i, &in, &gold);
            if (r > 0) break;
            if (r < 0) { rc = cli_fail(NULL); break; }
            /* the padded prompt is another unit: its own name (and key); unpadded as before */
            char unit[160];
            if (c->pad_to) snprintf(unit, sizeof unit, "%s#%d,pad=%d", kind == 1 ? "test" : c->bbh_tasks[t], i, c->pad_to);
            else snprintf(unit, sizeof unit, "%s#%d", kind == 1 ? "test" : c->bbh_tasks[t], i);
            if (!eval_take_unit(c, unit, pl, npl, n_cells(c))) { free(in); free(gold); continue; }
            char *prompt = concat3(shots, kind == 1 ? "" : "\n\n", QUESTION_MARK[kind]);
            char *full = prompt ? concat3(prompt, in, ANSWER_MARK[kind]) : NULL;
            int *ids = NULL, n = -1, pad = 0;
            if (full && c->chat_turns) {
                char *q = concat3(QUESTION_MARK[kind], in, ANSWER_MARK[kind]);
                n = q ? encode_turns(c, kind, shots, q, &ids) : -1;
                free(q);
            }
            else if (full) n = c->pad_to ? pad_prompt(c, fill, n_fill, full, &ids, &pad) : encode_prompt(c, full, &ids);
            if (n < 2) { rc = cli_fail("prompt"); }
            else {
                cJSON *uj = cJSON_CreateObject();
                cJSON_AddStringToObject(uj, "subset", kind == 1 ? "test" : c->bbh_tasks[t]);
                cJSON_AddNumberToObject(uj, "index", i);
                if (c->pad_to) {
                    cJSON_AddNumberToObject(uj, "pad_to", c->pad_to);
                    cJSON_AddNumberToObject(uj, "pad_tokens", pad);
                }
                /* the prompt's last token is fed as a decode step (query after compression) */
                rc = gen_unit(c, unit, uj, ids, n - 1, ids + n - 1, 1, c->max_new > 0 ? c->max_new : 256,
                              kind == 1 ? skv_gsm8k_stop : skv_bbh_stop, NULL, gold, kind, NULL);
            }
            free(ids); free(full); free(prompt); free(in); free(gold);
        }
        if (kind == 2) { free(shots); shots = NULL; }
    }
    free(shots);
    free(fill);
    return rc;
}

/* The chat template around a user text, as tokens: *pre the head (up to the text), *mid the
 * rest (end of the turn, the assistant's header). 0 or -1 + error. */
static int chat_wrap(const eval_cfg *c, int **pre, int *n_pre, int **mid, int *n_mid) {
    static const char MARK[] = "\x01SKV-USER-TEXT\x01";
    *pre = *mid = NULL;
    char *chat = skv_chat_prompt(c->llm->tok, NULL, MARK);
    char *at = chat ? strstr(chat, MARK) : NULL;
    if (!at) { free(chat); return chat ? skv_error("chat template: the user text is not in it") : -1; }
    *at = 0;
    const char *tail = at + strlen(MARK);
    int rc = -1;
    for (int k = 0; k < 2; k++) {
        const char *s = k ? tail : chat;
        int **o = k ? mid : pre, *no = k ? n_mid : n_pre;
        *no = skv_tokenize(c->llm->tok, s, strlen(s), true, NULL, 0);
        if (*no < 0 || !(*o = skv_malloc((size_t)*no * sizeof(int) + 1, "chat tokens"))) goto done;
        if (skv_tokenize(c->llm->tok, s, strlen(s), true, *o, *no) != *no) { skv_error("tokenizer: inconsistent counts"); goto done; }
    }
    rc = 0;
done:
    free(chat);
    if (rc) { free(*pre); free(*mid); *pre = *mid = NULL; }
    return rc;
}

/* niah: per kind, length, depth and variant one unit; the prompt is exactly the length, its
 * last token fed as a decode step (the question is in the prefill, as RULER's prompt has it) */
int eval_run_niah(eval_cfg *c) {
    int max_len = 0;
    for (int i = 0; i < c->n_lengths; i++) if (c->lengths[i] > max_len) max_len = c->lengths[i];
    int *fill = NULL, *pre = NULL, *mid = NULL, n_pre = 0, n_mid = 0, bos;
    const int n_fill = filler_tokens(c, max_len, &fill);
    if (n_fill < 0) return cli_fail("niah");
    if (c->chat) {
        if (chat_wrap(c, &pre, &n_pre, &mid, &n_mid)) { free(fill); return cli_fail("niah --chat"); }
    } else if (skv_tok_add_bos(c->llm->tok)) {
        bos = skv_tok_bos(c->llm->tok);
        pre = skv_malloc(sizeof(int), "bos");
        if (!pre) { free(fill); return cli_fail(NULL); }
        pre[0] = bos;
        n_pre = 1;
    }
    const skv_niah_wrap wrap = {.pre = pre, .n_pre = n_pre, .mid = mid, .n_mid = n_mid};
    c->work_total = (double)c->n_niah_kinds * c->n_lengths * c->n_depths * c->variants * n_cells(c);
    const skv_eval_pol *pl[MAXL];
    const int npl = eval_grid_pols(c, pl);
    int rc = CLI_OK;
    for (int ki = 0; ki < c->n_niah_kinds && rc == CLI_OK; ki++)
        for (int li = 0; li < c->n_lengths && rc == CLI_OK; li++)
            for (int di = 0; di < c->n_depths && rc == CLI_OK; di++)
                for (int v = 0; v < c->variants && rc == CLI_OK; v++) {
                    const skv_niah_kind kind = (skv_niah_kind)c->niah_kinds[ki];
                    const int L = c->lengths[li], D = c->depths[di];
                    const int needles = kind == SKV_NIAH_SINGLE ? 1 : c->needles;
                    char unit[160];
                    if (kind == SKV_NIAH_SINGLE) snprintf(unit, sizeof unit, "single,len=%d,depth=%d,v=%d", L, D, v);
                    else snprintf(unit, sizeof unit, "%s%d,len=%d,depth=%d,v=%d", skv_niah_kind_name(kind), needles, L, D, v);
                    if (!eval_take_unit(c, unit, pl, npl, n_cells(c))) continue;
                    skv_niah_unit u;
                    if (skv_niah_build(c->llm->tok, fill, n_fill, &wrap, kind, L, D, needles, skv_niah_seed(kind, L, D, v), &u)) {
                        rc = cli_fail(unit);
                        break;
                    }
                    const char *refs[SKV_NIAH_MAX_NEEDLES];
                    char gold[SKV_NIAH_MAX_NEEDLES * (SKV_NIAH_VALUE_DIGITS + 1) + 1] = "";
                    for (int k = 0; k < u.n_gold; k++) {
                        refs[k] = u.values[k];
                        strcat(gold, k ? "," : "");
                        strcat(gold, u.values[k]);
                    }
                    cJSON *uj = cJSON_CreateObject(), *nd = cJSON_CreateArray();
                    cJSON_AddStringToObject(uj, "kind", skv_niah_kind_name(kind));
                    cJSON_AddNumberToObject(uj, "length", L);
                    cJSON_AddNumberToObject(uj, "depth", D);
                    cJSON_AddNumberToObject(uj, "variant", v);
                    cJSON_AddNumberToObject(uj, "needles", needles);
                    cJSON_AddStringToObject(uj, "query", u.query);
                    for (int k = 0; k < u.n_needles; k++) {
                        cJSON *o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "key", u.keys[k]);
                        cJSON_AddStringToObject(o, "value", u.values[k]);
                        cJSON_AddNumberToObject(o, "depth", u.depth_pct[k]);
                        cJSON_AddNumberToObject(o, "token", u.pos[k]);
                        cJSON_AddItemToArray(nd, o);
                    }
                    cJSON_AddItemToObject(uj, "needle_list", nd);
                    cJSON_AddNumberToObject(uj, "context_tokens", u.n_prompt);
                    const gen_refs gr = {.refs = refs, .n_refs = u.n_gold};
                    int want = u.n_gold;
                    rc = gen_unit(c, unit, uj, u.prompt, u.n_prompt - 1, u.prompt + u.n_prompt - 1, 1,
                                  c->max_new > 0 ? c->max_new : 128, skv_niah_stop, &want, gold, GEN_NIAH, &gr);
                    skv_niah_free(&u);
                }
    free(fill); free(pre); free(mid);
    return rc;
}

/* longbench: per subset its first --limit records, LongBench's prompt (template, middle
 * truncation to --max-length tokens, --chat), greedy up to the subset's generation length */
int eval_run_longbench(eval_cfg *c) {
    const int limit = c->limit > 0 ? c->limit : 20;
    c->work_total = (double)limit * c->n_subsets * n_cells(c);
    const skv_eval_pol *pl[MAXL];
    const int npl = eval_grid_pols(c, pl);
    int rc = CLI_OK;
    for (int si = 0; si < c->n_subsets && rc == CLI_OK; si++) {
        char *tmpl = NULL;
        int max_gen = 0;
        cJSON *recs = skv_longbench_load(c->data_dir, c->subsets[si], &tmpl, &max_gen);
        if (!recs) {
            if (!strcmp(c->subsets[si], "multi_news")) skv_eval_need(c->data_dir, "multi_news");   /* say how to get it */
            return cli_fail("longbench");
        }
        const int n_rec = cJSON_GetArraySize(recs);
        for (int i = 0; i < limit && i < n_rec && rc == CLI_OK; i++) {
            char unit[160];
            snprintf(unit, sizeof unit, "%s#%d,max_length=%d", c->subsets[si], i, c->max_length);
            if (!eval_take_unit(c, unit, pl, npl, n_cells(c))) continue;
            const cJSON *rec = cJSON_GetArrayItem(recs, i), *ans = cJSON_GetObjectItemCaseSensitive(rec, "answers");
            int n_full = 0, *ids = NULL;
            char *prompt = skv_format_fields(tmpl, rec);
            char *cut = prompt ? skv_longbench_truncate(c->llm->tok, prompt, c->max_length, &n_full) : NULL;
            const int n = cut ? encode_prompt(c, cut, &ids) : -1;
            if (n < 2) {
                rc = cli_fail(unit);
            } else {
                const char *refs[64];
                int nr = 0;
                const cJSON *a;
                cJSON_ArrayForEach(a, ans) if (nr < 64) refs[nr++] = a->valuestring;
                cJSON *uj = cJSON_CreateObject();
                cJSON_AddStringToObject(uj, "subset", c->subsets[si]);
                cJSON_AddNumberToObject(uj, "index", i);
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(rec, "_id"), *len = cJSON_GetObjectItemCaseSensitive(rec, "length");
                if (cJSON_IsString(id)) cJSON_AddStringToObject(uj, "id", id->valuestring);
                if (cJSON_IsNumber(len)) cJSON_AddNumberToObject(uj, "length_words", len->valuedouble);
                cJSON_AddNumberToObject(uj, "max_length", c->max_length);
                cJSON_AddNumberToObject(uj, "prompt_tokens_full", n_full);
                cJSON_AddBoolToObject(uj, "truncated", n_full > c->max_length);
                cJSON_AddItemToObject(uj, "answers", cJSON_Duplicate(ans, 1));
                const gen_refs gr = {.refs = refs, .n_refs = nr};
                rc = gen_unit(c, unit, uj, ids, n - 1, ids + n - 1, 1, c->max_new > 0 ? c->max_new : max_gen, NULL, NULL,
                              refs[0], GEN_LONGBENCH, &gr);
            }
            free(ids); free(cut); free(prompt);
        }
        cJSON_Delete(recs);
        free(tmpl);
    }
    return rc;
}
