/* cpu_probe.h: whether the OpenMP threads the benchmarks use really run at the same time.
 * On a shared virtual machine two vCPUs can be backed by one physical CPU for minutes at a
 * time; compute-bound phases (the decode attention, prefill) then gain little from a second
 * thread, and a table taken in that state says less about the code than about the host. */
#ifndef SKV_CPU_PROBE_H
#define SKV_CPU_PROBE_H

/* Speed of each thread when all OpenMP threads run a dependent integer-add loop together,
 * as a fraction of one thread running it alone (best of 3 each; the slowest thread counts):
 * ~1.0 when every thread has a core of its own, ~1/k when k threads share one. */
double skv_parallel_probe(void);

#endif
