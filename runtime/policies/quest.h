/* quest.h: Quest's own interface beyond the policy table (quest.c): a page's upper bound,
 * for tests that check it bounds the true scores. */
#ifndef SKV_POLICY_QUEST_H
#define SKV_POLICY_QUEST_H
#include "policy.h"

extern const skv_policy_desc skv_policy_quest;

/* Quest's bound for one query head q (d floats) on page `page` of lane (layer, kvh), from
 * the page bounds as its last selection left them:
 * sum over channels of max(q_c * min_c, q_c * max_c) >= q . k for every key k of the page.
 * -1 + error for another policy or a page not yet seen. */
int skv_policy_quest_bound(const skv_policy *p, int layer, int kvh, int page, const float *q, float *out);

#endif
