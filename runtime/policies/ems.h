/* ems.h: EMS's own interface beyond the policy table (ems.c): its plan of the last merge,
 * for tests and reports. */
#ifndef SKV_POLICY_EMS_H
#define SKV_POLICY_EMS_H
#include "policy.h"

extern const skv_policy_desc skv_policy_ems;

/* EMS's plan for one lane after its last evict+merge: the look-up table of the kept
 * positions (gamma*N at most) and the centre each one uses (-1: dropped into the zero
 * class), and the centres' multiplicities. -1 + error for another policy. */
typedef struct {
    int n_lut;
    const int *lut_pos, *lut_centre;   /* (n_lut) position, its centre's position or -1 */
    int n_centre;
    const int *centre_pos, *centre_mult;
} skv_ems_plan;
int skv_policy_ems_plan(const skv_policy *p, int layer, int kvh, skv_ems_plan *out);

#endif
