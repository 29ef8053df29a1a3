/* api.h: what the public API's files (runtime/api/) share behind include/smallkv.h: the
 * handles' structs. */
#ifndef SKV_API_H
#define SKV_API_H
#include "include/smallkv.h"
#include "profiles/profile.h"
#include "runtime/backend/backend.h"
#include "runtime/model/model.h"
#include "runtime/session/session.h"

struct smallkv_pair {
    skv_model *llm, *slm;
    skv_profile *prof;
    int *map;                 /* (L*H) from the profile, as int */
    const skv_backend *dev;   /* the backend the uploads below are on, or NULL */
    void *dev_llm, *dev_slm;  /* the weights on it (dev_slm NULL without an SLM) */
};

struct smallkv_session {
    smallkv_pair *p;
    const skv_backend *be;
    skv_session *s;           /* the compressed cache on the host (every policy on the CPU), or */
    void *seq;                /* a full-cache sequence on a device (policy full off the CPU) */
    int seq_cap;              /* its context */
    size_t seq_token_bytes;   /* its K+V bytes per token */
    void *att;                /* s decoding on be (the CPU backend: s itself), NULL until the
                                 first step after a prefill */
    int prefill_tokens, decode_tokens;
    double prefill_s, decode_s;
    double t_prefill0;        /* start of the last prefill */
    double ttft;
    int has_logits;
};

/* Upload the pair's models to be (once; another backend's uploads are released). -1 + error. */
int api_pair_upload(smallkv_pair *p, const skv_backend *be);

#endif
