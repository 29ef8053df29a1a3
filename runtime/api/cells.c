/* cells.c: the evaluation's way into sessions (api.h, for eval/runner.c): a session of a
 * parsed policy spec with a head mapping of its own, the shared prefill base and the cells
 * derived from it, and what a record reads beyond smallkv_get_stats (the full memory
 * report, the online head map). Everything else a cell does goes through include/smallkv.h,
 * so a cell runs on whichever device its options name. */
#include "api.h"
#include "common/util.h"
#include <string.h>

/* the cell's session options, from the one builder (skv_session_opts_for) as for every
 * session; smallkv_options' other fields are applied after it (api_session_opts_apply) */
static int cell_opts(const smallkv_pair *p, const smallkv_options *o, const api_cell *c, skv_session_opts *so) {
    if (skv_session_opts_for(so, c->pol, o->budget, p->slm, c->map, c->map_depth)) return -1;
    if (c->T_max > 0) so->T_max = c->T_max;
    return 0;
}

smallkv_session *api_session_cell(smallkv_pair *p, const smallkv_options *o, const api_cell *c) {
    if (!p || !o || !c || !c->pol) { skv_error("api_session_cell: bad arguments"); return NULL; }
    const skv_backend *be = api_device(o->device);
    skv_session_opts so;
    if (!be || cell_opts(p, o, c, &so)) return NULL;
    return api_session_open(p, be, o, &so);
}

/* a public session on the CPU around the host session ss (taken over; a base before its
 * prefill, or a derived cell after it) */
static smallkv_session *wrap(smallkv_pair *p, skv_session *ss) {
    smallkv_session *s = skv_calloc(1, sizeof *s, "session");
    if (!s) { skv_session_free(ss); return NULL; }
    s->p = p;
    s->be = skv_backend_get("cpu");
    s->s = ss;
    s->t_prefill0 = skv_now();
    return s;
}

smallkv_session *api_session_base(smallkv_pair *p, const char *slm_policy, int max_ctx, int kv_f16, int T_max) {
    if (!p) { skv_error("api_session_base: no pair"); return NULL; }
    skv_session_opts o;
    skv_session_opts_default(&o);
    o.prefill_base = true;
    o.kv_f16 = kv_f16 != 0;
    o.max_ctx = max_ctx;
    if (T_max > 0) o.T_max = T_max;
    if (slm_policy && p->slm) {
        /* the policy at its defaults prepares the SLM to all layers: serves every depth */
        if (skv_policy_spec_default(slm_policy, &o.pol)) return NULL;
        o.slm = p->slm;
    }
    skv_session *ss = skv_session_new(p->llm, &o);
    return ss ? wrap(p, ss) : NULL;
}

smallkv_session *api_session_derive(smallkv_session *base, const smallkv_options *o, const api_cell *c) {
    if (!base || !base->s || !o || !c || !c->pol) { skv_error("api_session_derive: bad arguments"); return NULL; }
    const skv_backend *be = api_device(o->device);
    if (!be) return NULL;
    if (be != skv_backend_get("cpu")) {
        /* a derived session would have to be attached to the device mid-sequence: untried */
        skv_error("derive: a session on device %s prefills by itself", be->name);
        return NULL;
    }
    if (o->draft) { skv_error("derive: a drafting session prefills by itself"); return NULL; }
    skv_session_opts so;
    if (cell_opts(base->p, o, c, &so)) return NULL;
    api_session_opts_apply(base->p, o, &so);
    skv_session *d = skv_session_derive(base->s, &so);
    if (!d) return NULL;
    smallkv_session *s = wrap(base->p, d);
    if (s) s->has_logits = base->has_logits;   /* derive copies the base's last logits */
    return s;
}

void api_session_mem(const smallkv_session *s, skv_session_mem *r) {
    if (s->s) { skv_session_mem_report(s->s, r); return; }
    /* a full-cache sequence on a device: everything hot */
    memset(r, 0, sizeof *r);
    const skv_config *cfg = &s->p->llm->cfg;
    const int n = s->be->seq_length(s->seq);
    r->hot_used = r->hot_cap = r->full_equiv = s->seq_token_bytes * (size_t)n;
    r->hot_tokens = r->budget_tokens = (double)n * cfg->n_layer * cfg->n_kv_head;
}

const int *api_session_head_map(const smallkv_session *s) {
    const skv_policy *pol = s->s ? s->s->pol : NULL;
    return pol && pol->head_map ? pol->head_map(pol) : NULL;
}
