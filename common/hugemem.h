/* hugemem.h: memory for the large arrays a decode step reads end to end (model weights, their
 * decode copies, KV caches).
 *
 * A decode step sweeps every weight byte once; with 4 KiB pages that is one TLB miss (a page
 * walk) per 4 KiB, ~25,000 per SmolLM2 token. Backing these arrays with 2 MiB transparent
 * huge pages made SmolLM2 decode at 2048 tokens ~11 % faster on the development VM (median of
 * 8 alternated runs, docs/lab/performance-notebook.md). The machine's THP mode is usually
 * "madvise", so the memory is mapped anonymously, 2 MiB-aligned, and advised with
 * MADV_HUGEPAGE.
 * Pages are still faulted in on first touch, but 2 MiB at a time: a KV cache sized for a
 * long context shows up in the resident set in 2 MiB steps as its rows are first written.
 * Environment: SKV_HUGEPAGES=0 leaves out the advice (plain 4 KiB pages, same layout).
 * Under AddressSanitizer the arrays come from the heap instead, so that reads past their
 * ends are still caught. */
#ifndef SKV_HUGEMEM_H
#define SKV_HUGEMEM_H
#include <stddef.h>

/* n bytes, zeroed, 64-byte aligned (2 MiB-aligned from 2 MiB up); NULL + error naming
 * `what` when out of memory. Free with skv_huge_free(p, n), with the same n. */
void *skv_huge_alloc(size_t n, const char *what);
void skv_huge_free(void *p, size_t n);

#endif
